"""What a data loader's storage failure looks like in a rank's error: the service failed, not the sample.

Pure functions over one line of text. A storage failure is the object store or file service refusing or failing
the request for good: an HTTP 5xx status (``HTTP Error 503: Slow Down``, ``503 Service Unavailable``, S3's
``SlowDown``), retries given up (urllib3's ``Max retries exceeded``), a read or connect timeout, a missing object
(``NoSuchKey``, ``404 Not Found``). A sample that cannot be decoded (a truncated record, a bad label) is the data,
not the storage.
"""

from __future__ import annotations

import re
from typing import Final

STORAGE_FAILURE: Final = re.compile(
    r"HTTP Error 5\d\d|\b5\d\d (?:Server Error|Service Unavailable|Slow Down|Internal Server Error|Bad Gateway"
    r"|Gateway Time)|status(?: code)?[ =:]+5\d\d\b|\bSlowDown\b|\bServiceUnavailable\b"
    r"|Max retries exceeded|ReadTimeout|ConnectTimeout|Read timed out|NoSuchKey|NoSuchBucket|HTTP Error 404"
    r"|404 (?:Client Error|Not Found)|AISBatchLoaderError|Failed to fetch object"
)

DATA_LOADER_WRAPPER: Final = re.compile(r"Caught \w+ in DataLoader worker process \d+")
"""torch's re-raise of a DataLoader worker's exception: the original traceback follows in the same message."""


def is_storage_failure(text: str) -> bool:
    """True when an error line says the storage service failed the request for good."""
    return STORAGE_FAILURE.search(text) is not None
