"""validate: a tester's real deployment rehearsed on copies (run), its typed report (model) and renderers
(report), the streamed lane table (lanes), what holds rows back (stuck), `--anonymize` and the command
(cli). It uses the engram and scenario rooms, the canary's read paths and its triage dry runs."""
