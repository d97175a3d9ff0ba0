"""The small shared core every stage uses: ``atomic`` (files and folders written so a killed stage never
leaves a half-written output), ``digest`` (content identity of files, folders and JSON-able descriptions) and
``subset`` (seeded subsets with one "0 = all" rule)."""
