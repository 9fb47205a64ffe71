"""The row schema of the source (Spark's Kafka source schema) and its Arrow form.

Spark type                                         Arrow type Spark expects from read()
key binary                                         binary
value binary                                       binary
topic string                                       string
partition int                                      int32
offset long                                        int64
timestamp timestamp                                timestamp[us, tz=UTC]
timestampType int                                  int32 (0 CreateTime, 1 LogAppendTime)
headers array<struct<key:string,value:binary>>     list<element: struct<key, value>>
                                                   (only with includeHeaders=true)

Every field is nullable, as in Spark's Kafka source. The Arrow schema is derived with
pyspark's own converter so that it is equal to what Spark validates against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
    containsNull=True,
)

_BASE_FIELDS = [
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("offset", LongType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("timestampType", IntegerType(), True),
]


def source_schema(include_headers: bool) -> StructType:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")
