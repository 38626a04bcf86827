"""The platform spec: the admin's YAML, parsed once into frozen dataclasses.

* :mod:`.model` -- the typed spec (``Platform``, ``Team``, ``Pool``, ``Profile`` ...);
* :mod:`.fields` -- each YAML field declared once; :mod:`.parse` reads a document
  through them, :mod:`.validate` checks the whole, listing every error;
* :mod:`.gpus`, :mod:`.sharing`, :mod:`.quantities`, :mod:`.allocatable`,
  :mod:`.fallback`, :mod:`.jobs` -- the pure rules the model and builders share;
* :mod:`.grant` -- who may have which profile (``authorize``);
* :mod:`.source` -- the hub's live copy of the spec file.

Importing this package imports none of its modules.
"""
