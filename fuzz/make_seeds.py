#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora: small, well-formed inputs that reach deep into each
parser, so the fuzzer mutates from valid messages rather than discovering the formats byte by byte.

Usage: make_seeds.py OUT_DIR    (writes OUT_DIR/<target>/<name>; existing files are overwritten)

The encodings are written here from the format comments in the sources (independently of the C++
encoders): tcp_store_protocol.h (store frames), error_codec.cc (abort notices), connection.h
(transport frames: a 56-byte little-endian FrameHeader).
"""
import os
import struct
import sys


def u8(v): return struct.pack("<B", v)
def u32(v): return struct.pack("<I", v)
def i32(v): return struct.pack("<i", v)
def i64(v): return struct.pack("<q", v)
def blob(b): return u32(len(b)) + b
def strs(items): return u32(len(items)) + b"".join(blob(s) for s in items)
def frame(payload): return u32(len(payload)) + payload


# Store requests: op codes kSet=1 .. kErase=7.
REQUESTS = {
    "set": u8(1) + blob(b"key") + blob(b"value"),
    "get": u8(2) + blob(b"key") + i64(0),
    "get_never": u8(2) + blob(b"key") + i64(-1),
    "add": u8(3) + blob(b"counter") + i64(5),
    "compare_set": u8(4) + blob(b"key") + blob(b"") + blob(b"new"),
    "wait": u8(5) + strs([b"key", b"other"]) + i64(0),
    "check": u8(6) + strs([b"key"]),
    "erase": u8(7) + blob(b"key"),
}

# Abort notices: version 1, type tag, message, details.
ERRORS = {
    "error": u8(1) + u8(0) + blob(b"plain error"),
    "invalid_argument": u8(1) + u8(1) + blob(b"bad argument"),
    "timeout": u8(1) + u8(2) + blob(b"timed out") + u32(2) + i32(1) + i32(3),
    "peer": u8(1) + u8(3) + blob(b"peer died") + i32(2),
    "mismatch": u8(1) + u8(4) + blob(b"mismatch") + blob(b"count") + u32(2) + i32(0) + i32(1),
    "unsupported": u8(1) + u8(5) + blob(b"unsupported"),
    "internal": u8(1) + u8(6) + blob(b"internal"),
}

# Store replies: status kOk=0, kTimeout=1, kError=2.
REPLIES = {
    "ok": u8(0),
    "ok_value": u8(0) + blob(b"v"),
    "ok_i64": u8(0) + i64(7),
    "ok_flag": u8(0) + u8(1),
    "timeout": u8(1) + strs([b"k"]),
    "error": u8(2) + blob(ERRORS["invalid_argument"]),
}

FRAME_MAGIC = 0x46524843


def frame_header(kind, tag, nbytes, sequence=0, count=0, root=-1, collective=8):
    # FrameHeader: magic u32, kind u8, reserved[3], tag u64, bytes u64, then the 32-byte Fingerprint
    # (sequence u64, count u64, root i32, collective/reduceOp/dataType/algorithm u8, shape u64;
    # defaults kBarrier=8, 0xff, 0xff, 0, 0).
    fingerprint = struct.pack("<QQiBBBBQ", sequence, count, root, collective, 0xFF, 0xFF, 0, 0)
    return struct.pack("<IB3xQQ", FRAME_MAGIC, kind, tag, nbytes) + fingerprint


def receive(tag, nbytes):
    return u8(tag) + struct.pack("<H", nbytes)


def tcp_frame_seeds():
    data16 = frame_header(1, 4, 16) + bytes(range(16))
    abort = frame_header(2, 0, len(ERRORS["mismatch"])) + ERRORS["mismatch"]
    goodbye = frame_header(3, 0, 0)
    # byte0: chunk size; byte1: early receives (low 2 bits) | late receives (<< 2); receives.
    return {
        "posted_data": u8(47) + u8(1) + receive(4, 16) + data16,
        "unexpected_then_late_receive": u8(5) + u8(1 << 2) + receive(4, 16) + data16,
        "two_messages_split": u8(0) + u8(2) + receive(4, 16) + receive(4, 16) + data16 + data16,
        "empty_message": u8(96) + u8(1) + receive(9, 0) + frame_header(1, 9, 0),
        "abort": u8(96) + u8(0) + abort,
        "data_then_goodbye": u8(20) + u8(1) + receive(4, 16) + data16 + goodbye,
    }


def main():
    out = sys.argv[1]
    corpora = {
        "store_request_fuzzer": {
            **REQUESTS,
            "stream": b"".join(frame(p) for p in REQUESTS.values()),
        },
        "store_server_fuzzer": {
            "all_ops": b"".join(frame(REQUESTS[n]) for n in
                                ["set", "get", "add", "compare_set", "check", "erase"]),
            "add_twice": frame(REQUESTS["add"]) * 2,
            "wait_present": frame(REQUESTS["set"]) + frame(REQUESTS["wait"]),
        },
        "store_reply_fuzzer": {
            # byte 0: first operation (0 = set); then one reply per call.
            "ok_in_order": u8(0) + b"".join(frame(REPLIES[n]) for n in [
                "ok", "ok_value", "ok_i64", "ok_value", "ok", "ok_flag", "ok_flag"]),
            "timeout_reply": u8(1) + frame(REPLIES["timeout"]),
            "error_reply": u8(2) + frame(REPLIES["error"]),
        },
        "tcp_frame_fuzzer": tcp_frame_seeds(),
        "error_codec_fuzzer": ERRORS,
        "handshake_fuzzer": {"hello": b"CHORUSH1" + bytes(32) + bytes(40)},
    }
    for target, seeds in corpora.items():
        directory = os.path.join(out, target)
        os.makedirs(directory, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
