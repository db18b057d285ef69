"""The npz feature layout every generator family writes (TpuGraphs README, "Node Features"
and "Tile Config Features")."""

from __future__ import annotations

import numpy as np

MAX_NODES = 394  # the largest real tile:xla kernel

# HLO opcode ids of the TpuGraphs featuriser used by the generators (0 = unknown;
# 97 "trace" and 101 "tuple-select" are tombstones and never emitted).
OPCODES: dict[str, int] = {
    "abs": 1,
    "add": 2,
    "bitcast": 11,
    "broadcast": 13,
    "clamp": 17,
    "compare": 20,
    "concatenate": 22,
    "constant": 24,
    "convert": 25,
    "convolution": 26,
    "copy": 27,
    "divide": 32,
    "dot": 34,
    "dynamic-slice": 35,
    "exponential": 37,
    "get-tuple-element": 45,
    "iota": 48,
    "log": 50,
    "maximum": 57,
    "minimum": 58,
    "multiply": 59,
    "negate": 60,
    "pad": 62,
    "parameter": 63,
    "power": 66,
    "reduce": 70,
    "reduce-window": 72,
    "reshape": 75,
    "rsqrt": 81,
    "select": 83,
    "shift-right-logical": 89,
    "slice": 92,
    "sqrt": 94,
    "subtract": 95,
    "tanh": 96,
    "transpose": 98,
    "tuple": 100,
    "logistic": 107,
}

# Column indices in node_feat.
COL_IS_ROOT = 0
COL_ELEM_TYPE = 2  # one-hot over columns 2..20
COL_SHAPE = 21  # 6 dims, then sum (27) and product (28)
COL_TUPLE_SIZE = 29
COL_PARAM_NUMBER = 30
COL_DIMENSIONS = 31  # 6 entries, no aggregates
COL_WINDOW_SIZE = 37
COL_WINDOW_STRIDE = 45
COL_WINDOW_PAD_LOW = 53
COL_WINDOW_PAD_HIGH = 61
COL_WINDOW_DILATION = 69
COL_BASE_DILATION = 77
COL_REVERSAL_FALSE = 92
COL_CONV_DIMS = 93  # 93..106
COL_FEATURE_GROUPS = 107
COL_BATCH_GROUPS = 108
COL_SLICE_START = 109  # blocks of 2 dims + sum + product
COL_SLICE_STRIDE = 113
COL_SLICE_LIMIT = 117
COL_PAD_LOW = 125
COL_PAD_HIGH = 129
COL_LAYOUT = 134  # minor_to_major, 6 entries

# Product columns of node features are 1 for an empty list (featuriser behaviour; the
# real train means of these columns are ~1.0).
NODE_PRODUCT_COLS = (28, 44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)

# Offsets of element types inside the one-hot block, and their sizes in bytes.
ELEM_TYPES: dict[str, tuple[int, int]] = {
    "pred": (1, 1),
    "s32": (4, 4),
    "u8": (6, 1),
    "u16": (7, 2),
    "u32": (8, 4),
    "f32": (11, 4),
    "bf16": (13, 2),
    "tuple": (16, 0),
}
# Bytes per element indexed by one-hot offset (invalid/opaque/token count as 0).
BYTES_BY_TYPE = np.array([0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2, 8, 16, 0, 0, 0], float)

# Config feature blocks: 6 bounds + sum + product each.
CFG_KERNEL = 0
CFG_OUTPUT = 8
CFG_INPUT = 16
