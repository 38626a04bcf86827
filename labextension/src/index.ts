// The GPU status item of jupyterhub-gpu: a status-bar text (profile's GPU, its use,
// the time left before the next stop) that opens a panel with the details, and a
// notification for each warning. The server decides every word and the warning
// level (jupyterhub_gpu/labext/status.py); this file only renders what
// GET /jupyterhub-gpu/api/status answers. It asks every `refresh_seconds` while the
// page is visible, and not at all while it is hidden, so an open tab never keeps an
// idle server alive.
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar, Popup, showPopup } from '@jupyterlab/statusbar';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

const PLUGIN_ID = 'jupyterhub-gpu-status:plugin';
const API_PATH = 'jupyterhub-gpu/api/status';
const SEEN_KEY = 'jupyterhub-gpu-status:alerts-seen';

type Level = 'ok' | 'warning' | 'danger';

interface IAlert {
  id: string;
  type: 'warning' | 'error' | 'info';
  message: string;
}

interface IStatus {
  level: Level;
  label: string;
  title: string;
  rows: [string, string][];
  alerts: IAlert[];
  refresh_seconds: number;
}

/** The server's answer, asked for while the page is visible. */
class StatusModel {
  constructor(settings: ServerConnection.ISettings) {
    this._settings = settings;
    this._poll = new Poll({
      factory: () => this._refresh(),
      frequency: { interval: 30 * 1000, backoff: true, max: 5 * 60 * 1000 },
      standby: 'when-hidden'
    });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get status(): IStatus | null {
    return this._status;
  }

  get updated(): Date | null {
    return this._updated;
  }

  private async _refresh(): Promise<void> {
    const url = URLExt.join(this._settings.baseUrl, API_PATH);
    const response = await ServerConnection.makeRequest(url, {}, this._settings);
    if (response.status === 404) {
      // not a jupyterhub-gpu server: no item at all
      this._status = null;
      this._changed.emit();
      this._poll.dispose();
      return;
    }
    if (!response.ok) {
      throw new ServerConnection.ResponseError(response);
    }
    this._status = (await response.json()) as IStatus;
    this._updated = new Date();
    const interval = this._status.refresh_seconds * 1000;
    if (interval > 0 && this._poll.frequency.interval !== interval) {
      this._poll.frequency = { ...this._poll.frequency, interval };
    }
    this._changed.emit();
  }

  private _settings: ServerConnection.ISettings;
  private _poll: Poll;
  private _status: IStatus | null = null;
  private _updated: Date | null = null;
  private _changed = new Signal<this, void>(this);
}

/** The panel the item opens. */
class StatusPanel extends Widget {
  constructor(model: StatusModel) {
    super();
    this.addClass('jp-GpuStatus-panel');
    this._model = model;
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    this._model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const status = this._model.status;
    const node = this.node;
    node.textContent = '';
    const heading = document.createElement('h3');
    heading.textContent = 'This server';
    node.appendChild(heading);
    if (!status) {
      node.appendChild(document.createTextNode('No status yet.'));
      return;
    }
    for (const alert of status.alerts) {
      const line = document.createElement('div');
      line.className = `jp-GpuStatus-alert jp-mod-${alert.type}`;
      line.textContent = alert.message;
      node.appendChild(line);
    }
    const table = document.createElement('table');
    for (const [name, value] of status.rows) {
      const row = table.insertRow();
      const th = document.createElement('th');
      th.textContent = name;
      row.appendChild(th);
      row.insertCell().textContent = value;
    }
    node.appendChild(table);
    const footer = document.createElement('div');
    footer.className = 'jp-GpuStatus-footer';
    const updated = this._model.updated;
    footer.textContent = updated
      ? `Updated ${updated.toLocaleTimeString()}`
      : 'Not updated yet';
    node.appendChild(footer);
  }

  private _model: StatusModel;
}

/** The status-bar item: one line of text, coloured by the warning level. */
class StatusItem extends Widget {
  constructor(model: StatusModel) {
    super();
    this.addClass('jp-StatusBar-TextItem');
    this.addClass('jp-GpuStatus-item');
    this.node.setAttribute('role', 'button');
    this.node.setAttribute('data-jupyterhub-gpu-status', '');
    this._model = model;
    model.changed.connect(this._render, this);
    this.node.addEventListener('click', () => this._toggle());
  }

  private _render(): void {
    const status = this._model.status;
    this.node.textContent = status ? status.label : '';
    this.node.title = status ? status.title : '';
    for (const level of ['warning', 'danger']) {
      this.toggleClass(`jp-mod-${level}`, status?.level === level);
    }
    this.node.setAttribute('data-level', status ? status.level : '');
  }

  private _toggle(): void {
    if (this._popup && !this._popup.isDisposed) {
      this._popup.dispose();
      this._popup = null;
      return;
    }
    this._popup = showPopup({
      body: new StatusPanel(this._model),
      anchor: this,
      align: 'left'
    });
  }

  private _model: StatusModel;
  private _popup: Popup | null = null;
}

/** Each warning once per browser tab session, as a notification that stays. */
function notifyNew(model: StatusModel): void {
  const seen = new Set<string>(
    JSON.parse(window.sessionStorage.getItem(SEEN_KEY) ?? '[]') as string[]
  );
  for (const alert of model.status?.alerts ?? []) {
    if (seen.has(alert.id)) {
      continue;
    }
    seen.add(alert.id);
    Notification.emit(alert.message, alert.type, { autoClose: false });
  }
  window.sessionStorage.setItem(SEEN_KEY, JSON.stringify([...seen]));
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    const model = new StatusModel(app.serviceManager.serverSettings);
    model.changed.connect(() => notifyNew(model));
    if (statusBar) {
      const item = new StatusItem(model);
      statusBar.registerStatusItem(PLUGIN_ID, {
        item,
        align: 'left',
        rank: 4,
        isActive: () => model.status !== null,
        activeStateChanged: model.changed
      });
    }
  }
};

export default plugin;
