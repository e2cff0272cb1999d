"""Check a ZIP archive (a .docx) from its central directory before anything is unpacked.

Python's `zipfile` never returns more bytes for a member than the directory declares (a
member that inflates further fails its CRC check instead), so the declared sizes bound
what reading the archive costs: their sum must fit `RAG_MAX_DOCX_UNZIPPED_BYTES`. Only
stored and deflated members are accepted, the two methods Word writes: `zipfile`
decompresses bzip2 and LZMA members in one call, so a small bzip2 bomb would fill memory
before the size check could stop it. Encrypted members and archives of more than
`MAX_MEMBERS` entries are refused too.
"""

from __future__ import annotations

import zipfile
from io import BytesIO

from rag_app.documents.errors import DocumentTooLargeError, UnreadableDocumentError

MAX_MEMBERS = 10_000
"""A Word document has a few dozen parts; thousands of entries only cost time."""
_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})


def check_zip(data: bytes, label: str, max_unzipped_bytes: int, hint: str) -> None:
    """Raise a `DocumentError` unless `data` is a ZIP archive that is safe to unpack."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as err:
        raise UnreadableDocumentError(label, str(err) or type(err).__name__, hint) from None
    if len(members) > MAX_MEMBERS:
        raise UnreadableDocumentError(
            label, f"a ZIP archive of {len(members):,} entries, over {MAX_MEMBERS:,}", hint
        )
    unzipped = 0
    for member in members:
        if member.flag_bits & 0x1:
            raise UnreadableDocumentError(label, f"{member.filename} is encrypted", hint)
        if member.compress_type not in _METHODS:
            raise UnreadableDocumentError(
                label,
                f"{member.filename} uses ZIP compression method {member.compress_type}, "
                "which Word never writes",
                hint,
            )
        unzipped += member.file_size
    if unzipped > max_unzipped_bytes:
        raise DocumentTooLargeError(
            label,
            f"would unpack to {unzipped:,} bytes",
            "RAG_MAX_DOCX_UNZIPPED_BYTES",
            max_unzipped_bytes,
        )
