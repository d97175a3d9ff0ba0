"""The test suite. A package so that ``tests.helpers`` imports (the repo root is on pytest's ``pythonpath``);
it also shadows the top-level ``tests`` package that OpenRLHF installs into site-packages."""
