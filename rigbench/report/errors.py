"""The one error a report raises (light to import: the CLI catches it)."""


class ReportError(Exception):
    """The report cannot be made; the message says why and what to do."""
