"""The hand-computable inputs the estimate's tests share: a known small model and a machine
whose every rate is a round number."""

from rlcore.forecast.calibrate import Speeds
from rlcore.forecast.shape import ModelShape

# 1,000 parameters of which a 50 x 10 tied embedding, 2 layers.
SMALL = ModelShape(params=1000, hidden=10, layers=2, vocab=50, heads=2, kv_heads=1)
FLAT = Speeds(
    matmul_flops={"float32": 1e9},
    stream_bytes={"float32": 1e9},
    op_s=0.0,
    copy_bytes=1e9,
    import_s=1.0,
    threads=1,
)
"""1 GFLOP/s, 1 GB/s, free tiny ops, 1 s per import unit, one thread."""
