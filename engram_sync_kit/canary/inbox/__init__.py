"""inbox: the virtual inbox of unenrolled memories: its selection and tripwires, their cursor, the key map
and aliases, the settings and the rendering never import the triage room (tests/contract/test_layering.py);
only its cli drives triage's claim and drop."""
