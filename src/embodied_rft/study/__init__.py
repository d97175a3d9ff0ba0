"""Studies: experiments as data. A study file (``conf/study/<name>.yaml``) declares arms, seeds, comparisons and
checks; :mod:`.dvcgen` makes it a DVC pipeline; :mod:`.table` writes its table in the one schema every study shares
(docs/studies.md)."""
