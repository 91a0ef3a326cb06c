"""Why a run died: the failure catalog (data, `configs/failures.toml`), the scanner that finds its kinds in
log text however the text was wrapped, pasted or repeated, and the diagnosis that names the earliest
independent failure as the cause and the rest as its consequences."""

from backend.signals.failures.catalog import FailureCatalog, FailureKind, load_catalog
from backend.signals.failures.diagnosis import Diagnosis, Finding, Incident, diagnose, incidents
from backend.signals.failures.events import FailureEvent
from backend.signals.failures.scanner import FailureScanner

__all__ = [
    "Diagnosis",
    "FailureCatalog",
    "FailureEvent",
    "FailureKind",
    "FailureScanner",
    "Finding",
    "Incident",
    "diagnose",
    "incidents",
    "load_catalog",
]
