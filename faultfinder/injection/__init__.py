"""Controlled failure injection (the Who&When Pro method, INJECTION.md): the replay proxy
(`proxy`), the exchanges it records and replays (`exchanges`), the injectors of each error
mode (`injectors`), grading (`grading`) and the harness behind `faultfinder inject run`
(`harness`)."""
