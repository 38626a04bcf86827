"""The platform spec: the admin's YAML, parsed once into frozen dataclasses.

* :mod:`.model`, :mod:`.profiles` -- the typed spec (``Platform``, ``Team``, ``Pool``,
  ``Profile`` ...), each YAML field declared once on its dataclass field (:mod:`.keys`:
  key, reader from :mod:`.readers`, default, description);
* :mod:`.fields` -- the sections read through those declarations; :mod:`.parse` reads a
  document with them, :mod:`.validate` checks the whole, listing every error;
* :mod:`.gpus`, :mod:`.sharing`, :mod:`.quantities`, :mod:`.allocatable`,
  :mod:`.fallback`, :mod:`.jobs` -- the pure rules the model and builders share;
* :mod:`.grant` -- who may have which profile (``authorize``);
* :mod:`.source` -- the hub's live copy of the spec file.

Importing this package imports none of its modules.
"""
