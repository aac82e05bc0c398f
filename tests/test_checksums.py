"""Block CRC-32s of a dataset's bytes (distgrail/stages/checksums.py, kernels/checksums.cu): the
NumPy twin against zlib block by block over lengths, block sizes and chunk sizes that leave short
last blocks and short last chunks; the maths it rests on (products, shifts, the slicing tables)
against zlib; on a GPU (``gpu`` marker) the kernel's block values and CRC-32s against the twin bit
for bit, on arrays of several types, at unaligned starts and at the stored datasets' sizes."""

import zlib

import numpy as np
import pytest

from distgrail.constants import CRC_CHUNK, CRC_POLY
from distgrail.indexfile.layout import block_crcs, block_size, crc32_combine
from distgrail.stages.checksums import (X2K, block_crcs_numpy, block_raws_numpy, finish, slicing_tables,
                                        times_mod_p, x_to_8n)


def _zlib_blocks(data, block):
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8).tobytes()
    return [zlib.crc32(raw[i:i + block]) for i in range(0, len(raw), block)]


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 255, 4097, 65539])
@pytest.mark.parametrize("block", [1, 7, 64, 4096, 1 << 17])
@pytest.mark.parametrize("chunk", [1, 3, 16, 4096])
def test_the_twin_gives_zlibs_crc_of_every_block(n, block, chunk):
    data = np.random.default_rng(n + block + chunk).integers(0, 256, n, dtype=np.uint8)
    got = block_crcs_numpy(data, block, chunk)
    assert got.dtype == np.uint32 and got.tolist() == _zlib_blocks(data, block)


@pytest.mark.parametrize("dtype,shape", [(np.uint64, (1001, 3)), (np.int32, (3, 517, 2)), (np.uint8, (9999,)),
                                         (np.int64, (0, 4))])
def test_the_twin_takes_any_array_as_its_bytes_run(dtype, shape):
    a = np.random.default_rng(3).integers(0, 200, shape).astype(dtype)
    block = block_size(a.nbytes) if a.nbytes > (4 << 20) else 1000
    want = [f.result() for f in block_crcs(a, block, _Pool())] if a.size else []
    assert block_crcs_numpy(a, block, 100).tolist() == want == _zlib_blocks(a, block)


class _Pool:  # (block_crcs' futures, run at once)
    def submit(self, fn, *args):
        class F:
            def result(self):
                return fn(*args)
        return F()


def test_the_raw_values_are_zlibs_crc_without_the_initial_and_final_xor():
    data = np.frombuffer(b"123456789" * 50, dtype=np.uint8)
    raws = block_raws_numpy(data, 100, 7)
    for k, r in enumerate(raws.tolist()):
        part = data[100 * k:100 * (k + 1)].tobytes()
        assert r == zlib.crc32(part, 0xFFFFFFFF) ^ 0xFFFFFFFF  # (zlib inverts its register in and out)
    assert finish(raws, data.size, 100).tolist() == _zlib_blocks(data, 100)
    assert zlib.crc32(b"123456789") == 0xCBF43926  # (the check value of CRC-32)


def test_products_and_shifts_match_zlibs_combine():
    rng = np.random.default_rng(5)
    for n in (0, 1, 3, 100, 4096, 1 << 20):
        a, b = rng.bytes(17), rng.bytes(n)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    # x^(8 n): n zero bytes through a register that holds x^0
    for n in (0, 1, 2, 5, 31, 1000):
        c = 1 << 31
        tab = slicing_tables()[0]
        for _ in range(n):
            c = int(tab[c & 0xFF]) ^ (c >> 8)
        assert x_to_8n(n) == c, n
    # x's powers repeat with a period dividing 2^32 - 1: 2^32 - 1 bytes of zeros change nothing
    assert x_to_8n((1 << 32) - 1) == 1 << 31 and x_to_8n((1 << 32) + 6) == x_to_8n(7)
    assert X2K[0] == 1 << 30 and all(times_mod_p(X2K[k], X2K[k]) == X2K[(k + 1) & 31] for k in range(32))
    assert times_mod_p(1 << 31, 0x12345678) == 0x12345678 == times_mod_p(0x12345678, 1 << 31)


def test_the_slicing_tables_take_a_byte_further_on_per_row():
    t = slicing_tables()
    assert t.shape == (4, 256) and t.dtype == np.uint32 and t[0, 1] == 0x77073096 and t[0, 128] == CRC_POLY
    for byte in (0, 1, 77, 255):
        c = byte  # the register after one byte, then k zero bytes
        for k in range(4):
            assert int(t[k, byte]) == (c := (int(t[0, byte]) if k == 0 else (c >> 8) ^ int(t[0, c & 0xFF]))), (byte, k)


def test_bad_block_or_chunk_sizes_are_refused():
    with pytest.raises(ValueError, match="positive"):
        block_raws_numpy(np.zeros(4, np.uint8), 0)
    with pytest.raises(ValueError, match="positive"):
        block_raws_numpy(np.zeros(4, np.uint8), 4, 0)


def test_the_default_chunk_divides_the_file_blocks():
    from distgrail.indexfile.layout import CRC_BLOCK

    assert CRC_BLOCK % CRC_CHUNK == 0 and CRC_CHUNK % 16 == 0  # (whole 16-byte words in a full chunk)


# -- on a GPU ------------------------------------------------------------------------------------

def _gpu():
    from distgrail.gpu.backend import get_backend

    return get_backend("gpu")


@pytest.mark.gpu
@pytest.mark.parametrize("n,block,chunk", [(1, 1, 1), (100003, 4096, 16), (100003, 1000, 7), (1 << 20, 1 << 16, 4096),
                                           (5 << 20, 3 << 20, 4096), (0, 64, 16)])
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_the_kernel_gives_the_twins_values_bit_for_bit(n, block, chunk, offset):
    from distgrail.stages.checksums import block_crcs_cuda

    be = _gpu()
    cp = be.xp
    host = np.random.default_rng(n + offset).integers(0, 256, n + offset, dtype=np.uint8)
    with be.on_device():
        dev = cp.asarray(host)[offset:]  # (an unaligned start: the bytes before the first 16-byte word)
        raws = block_crcs_cuda(be, dev, block, chunk, raw=True)
        got = block_crcs_cuda(be, dev, block, chunk)
    assert raws.tolist() == block_raws_numpy(host[offset:], block, chunk).tolist()
    assert got.tolist() == block_crcs_numpy(host[offset:], block, chunk).tolist() == _zlib_blocks(host[offset:], block)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,shape", [(np.uint64, (1 << 20, 2)), (np.int32, (5, 1 << 20, 2)), (np.uint16, (7 << 20,))])
def test_the_kernel_gives_a_stored_datasets_crcs(dtype, shape):
    from distgrail.stages.checksums import block_crcs_cuda

    be = _gpu()
    a = np.random.default_rng(7).integers(0, 60000, shape).astype(dtype)
    block = block_size(a.nbytes)
    with be.on_device():
        got = block_crcs_cuda(be, be.xp.asarray(a), block)
    assert got.tolist() == [f.result() for f in block_crcs(a, block, _Pool())]


@pytest.mark.gpu
def test_the_benchmark_prints_both_rows_side_by_side_on_a_gpu(capsys):
    import json

    from distgrail.benchmarks import checksums

    assert checksums.main(["--mib", "64", "--repeat", "2", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["blocks"] == 16 and row["gpu_seconds"] > 0 and row["host_over_gpu"] > 0
    assert row["gpu_first_seconds"] > 0 and row["mib"] == 64
