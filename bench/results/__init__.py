"""The results folder: its layout and atomic writes, run metadata, redaction of secrets."""
