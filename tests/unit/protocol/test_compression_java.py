"""Compression interop with the Java libraries Kafka's own clients and brokers use.

snappy-java (``SnappyInputStream``/``SnappyOutputStream``: the xerial framing), zstd-jni
(``ZstdInputStreamNoFinalizer``/``ZstdOutputStreamNoFinalizer``) and java.util.zip are
exactly what Kafka wraps for those codecs. For LZ4 Kafka has its own
``KafkaLZ4BlockInputStream``; lz4-java's standard ``LZ4FrameInputStream`` stands in here
(the header Kafka's writer produces is checked byte for byte in test_compression.py).
The jars come with pyspark (a project dependency); Java 17 is a system dependency.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pyspark

from riverbed.protocol.compression import CompressionType, compress, decompress

CODECS = {
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
JARS = ("snappy-java-", "zstd-jni-", "lz4-java-")

JAVA_SOURCE = r"""
import java.io.*;
import java.nio.file.*;
import java.util.zip.*;
import org.xerial.snappy.SnappyInputStream;
import org.xerial.snappy.SnappyOutputStream;
import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import com.github.luben.zstd.ZstdOutputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import net.jpountz.lz4.LZ4FrameOutputStream;

public class CodecInterop {
    static InputStream reader(String codec, InputStream raw) throws IOException {
        switch (codec) {
            case "gzip": return new GZIPInputStream(raw, 8 * 1024);
            case "snappy": return new SnappyInputStream(raw);
            case "lz4": return new LZ4FrameInputStream(raw);
            case "zstd": return new ZstdInputStreamNoFinalizer(raw);
            default: throw new IllegalArgumentException(codec);
        }
    }

    static OutputStream writer(String codec, OutputStream raw) throws IOException {
        switch (codec) {
            case "gzip": return new GZIPOutputStream(raw, 8 * 1024);
            case "snappy": return new SnappyOutputStream(raw);
            case "lz4": return new LZ4FrameOutputStream(raw, LZ4FrameOutputStream.BLOCKSIZE.SIZE_64KB);
            case "zstd": return new ZstdOutputStreamNoFinalizer(raw, 3);
            default: throw new IllegalArgumentException(codec);
        }
    }

    public static void main(String[] args) throws Exception {
        Path dir = Paths.get(args[0]);
        byte[] plain = Files.readAllBytes(dir.resolve("plain"));
        for (int i = 1; i < args.length; i++) {
            String codec = args[i];
            byte[] ours = Files.readAllBytes(dir.resolve("riverbed." + codec));
            try (InputStream in = reader(codec, new ByteArrayInputStream(ours))) {
                Files.write(dir.resolve("java_dec." + codec), in.readAllBytes());
            }
            ByteArrayOutputStream bo = new ByteArrayOutputStream();
            try (OutputStream out = writer(codec, bo)) {
                out.write(plain);
            }
            Files.write(dir.resolve("java_enc." + codec), bo.toByteArray());
        }
    }
}
"""


def _classpath() -> str:
    jars_dir = Path(pyspark.__file__).parent / "jars"
    jars = [p for p in jars_dir.iterdir() if p.name.startswith(JARS)]
    assert len(jars) == len(JARS), f"expected {JARS} in {jars_dir}, found {jars}"
    return os.pathsep.join(str(p) for p in jars)


def test_java_reads_riverbed_and_riverbed_reads_java(tmp_path: Path) -> None:
    java = shutil.which("java")
    assert java, "Java 17+ is a system dependency (make sysdeps installs it)"
    rng = random.Random(3)
    # ~300 kB of records-like bytes: several snappy (32 KiB) and lz4 (64 KiB) blocks
    plain = b"".join(rng.randbytes(40) + b'{"user":%d,"event":"view"}' % i for i in range(4500))
    (tmp_path / "plain").write_bytes(plain)
    for name, codec in CODECS.items():
        (tmp_path / f"riverbed.{name}").write_bytes(compress(codec, plain))
    src = tmp_path / "CodecInterop.java"
    src.write_text(JAVA_SOURCE)
    subprocess.run(
        [java, "-Xmx256m", "-cp", _classpath(), str(src), str(tmp_path), *CODECS],
        check=True,
        timeout=120,
        capture_output=True,
    )
    for name, codec in CODECS.items():
        assert (tmp_path / f"java_dec.{name}").read_bytes() == plain, f"Java read our {name}"
        java_bytes = (tmp_path / f"java_enc.{name}").read_bytes()
        assert decompress(codec, java_bytes) == plain, f"we read Java's {name}"
    assert (tmp_path / "java_enc.snappy").read_bytes()[:8] == b"\x82SNAPPY\x00"
