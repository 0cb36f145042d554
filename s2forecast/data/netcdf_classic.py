"""The size a classic NetCDF file (NetCDF3: CDF-1, 64-bit offset CDF-2, CDF-5) must have, from its header.

The old CDS delivered ERA5 as 64-bit-offset NetCDF3. A download cut short still opens, and
netCDF-C returns zeros for the bytes past the end of the file instead of an error: a truncated
file would be converted with zeros in its last fields. Its header states where each variable's data
begins and how many records there are, so the size the file needs is known before any data is read.
HDF5-based NetCDF4 files fail to open when truncated and need no such check.

Format: https://docs.unidata.ucar.edu/netcdf-c/current/file_format_specifications.html
"""

from pathlib import Path

MAGIC = b"CDF"
NC_DIMENSION, NC_VARIABLE, NC_ATTRIBUTE = 0x0A, 0x0B, 0x0C
# nc_type -> bytes per value (NC_BYTE, CHAR, SHORT, INT, FLOAT, DOUBLE; CDF-5: UBYTE ... UINT64)
TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}


class _Header:
    """Reads the header's big-endian fields in order (CDF-5 counts in 8 bytes, the others in 4)."""

    def __init__(self, data: bytes, version: int):
        self.data, self.position, self.version = data, 4, version

    def integer(self, size: int) -> int:
        if self.position + size > len(self.data):
            raise EOFError
        value = int.from_bytes(self.data[self.position : self.position + size], "big")
        self.position += size
        return value

    def count(self) -> int:  # numrecs, nelems, dim lengths and ids, vsize: 8 bytes in CDF-5
        return self.integer(8 if self.version == 5 else 4)

    def skip(self, size: int) -> None:
        self.position += (size + 3) // 4 * 4  # values and names are padded to 4 bytes
        if self.position > len(self.data):
            raise EOFError

    def name(self) -> None:
        self.skip(self.count())

    def attributes(self) -> None:
        tag, count = self.integer(4), self.count()
        if tag not in (0, NC_ATTRIBUTE):
            raise ValueError(f"attribute list tag {tag}")
        for _ in range(count):
            self.name()
            kind = self.integer(4)
            self.skip(self.count() * TYPE_SIZES[kind])


def required_size(path: str | Path) -> int | None:
    """The bytes ``path`` needs for all its data, if it is a classic NetCDF file; None for any
    other file (NetCDF4/HDF5, GRIB) or a header that does not state its number of records.

    Raises:
        ValueError: a classic-NetCDF header that is itself cut short or malformed.
    """
    with open(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4 or head[:3] != MAGIC or head[3] not in (1, 2, 5):
            return None
        data = head + f.read(1 << 24)  # headers of ERA5 files take a few KB
    version = head[3]
    reader = _Header(data, version)
    try:
        numrecs = reader.count()
        tag, count = reader.integer(4), reader.count()
        if tag not in (0, NC_DIMENSION):
            raise ValueError(f"dimension list tag {tag}")
        lengths = []
        for _ in range(count):
            reader.name()
            lengths.append(reader.count())
        reader.attributes()  # global attributes
        tag, count = reader.integer(4), reader.count()
        if tag not in (0, NC_VARIABLE):
            raise ValueError(f"variable list tag {tag}")
        fixed_end, records = 0, []  # records: (begin, bytes of one record)
        for _ in range(count):
            reader.name()
            dims = [reader.count() for _ in range(reader.count())]
            reader.attributes()
            size = TYPE_SIZES[reader.integer(4)]
            reader.count()  # vsize: recomputed from the dims (it saturates for variables over 4 GiB)
            begin = reader.integer(4 if version == 1 else 8)
            record = bool(dims) and lengths[dims[0]] == 0
            for dim in dims[1:] if record else dims:
                size *= lengths[dim]
            if record:
                records.append((begin, size))
            else:
                fixed_end = max(fixed_end, begin + size)
    except (EOFError, KeyError, IndexError) as error:
        raise ValueError(f"its header is cut short or malformed ({type(error).__name__})") from None
    if not records:
        return fixed_end
    if numrecs == (1 << (64 if version == 5 else 32)) - 1:  # streaming: the records are not counted
        return None
    # one record holds every record variable, each padded to 4 bytes (one alone is not padded)
    record_size = records[0][1] if len(records) == 1 else sum((size + 3) // 4 * 4 for _, size in records)
    records_end = max(begin + (numrecs - 1) * record_size + size for begin, size in records) if numrecs else 0
    return max(fixed_end, records_end)
