// @jupyterlab/builder reads JupyterLab's core metadata (which packages the page
// shares, and their versions) from <core-path>/package.json. Take it from the pinned
// @jupyterlab/core-meta, not from whatever JupyterLab is installed, so the build
// depends only on package-lock.json.
const fs = require('fs');
const path = require('path');

const source = require.resolve('@jupyterlab/core-meta/core.package.json');
const target = path.join(__dirname, '..', 'build', 'core');
fs.mkdirSync(target, { recursive: true });
fs.copyFileSync(source, path.join(target, 'package.json'));
