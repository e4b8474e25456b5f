#!/usr/bin/env python3
"""Tests of check_layers.py on small trees written to a temporary folder: it
passes a tree that keeps the layers and names every edge that breaks one, with
its file and line. ctest runs it (tools.check_layers_test); by hand:
python3 tests/tools/test_check_layers.py"""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

TODAY = "util < gguf < cpu < tokenizer < model < engine < kv < rpc\n"
TARGET = "util < gguf < cpu < tokenizer < model < kv_codec < kv_cache < engine < kv_stream < rpc\n"

# A tree that keeps every rule: each file's includes, one per line.
GOOD = {
    "common/util/status.h": [],
    "common/util/status.cc": ['"status.h"', "<vector>"],
    "common/engine/engine.h": ['"common/util/status.h"', '"common/model/spec.h"'],
    "common/model/spec.h": ['"common/util/status.h"'],
    "common/kv/kv_codec.h": ['"common/engine/engine.h"', '"proto/baton.pb.h"', '"absl/status/status.h"'],
    "edge_decode/edge_service.cc": ['"common/kv/kv_codec.h"', '"edge_decode/edge_service.h"'],
    "edge_decode/edge_service.h": [],
    "cloud_prefill/prefill_service.cc": ['"common/kv/kv_codec.h"', '"cloud_prefill/cuda/ops.h"'],
    "cloud_prefill/cuda/ops.h": ["<cuda_runtime.h>"],
    "tools/cli/cmd_generate.cc": ['"edge_decode/edge_service.h"', '"flags.h"', "<string>"],
    "tools/cli/flags.h": [],
    "tools/bench/cmd_bench_cuda.cc": ['"cloud_prefill/cuda/ops.h"', "<cuda_runtime.h>", '"tools/cli/flags.h"'],
    "tools/cmd_bench_flat.cc": ['"cloud_prefill/prefill_service.cc"'],  # today's flat tools/: no cli rule
}


def write_tree(root, files, layers):
    for path, incs in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write("// test file\n#pragma once\n")
            for inc in incs:
                f.write(f"#include {inc}\n")
    layers_path = os.path.join(root, "layers.txt")
    with open(layers_path, "w", encoding="utf-8") as f:
        f.write(layers)
    return layers_path


def run(files, layers=TODAY):
    """(exit code, printed lines) of check_layers on a temporary tree."""
    with tempfile.TemporaryDirectory() as root:
        layers_path = write_tree(root, files, layers)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = check_layers.main(["--root", root, "--layers", layers_path])
        return code, out.getvalue().splitlines()


def with_file(path, *incs):
    files = dict(GOOD)
    files[path] = list(incs)
    return files


class CheckLayersTest(unittest.TestCase):
    def assert_fails_with(self, files, expected, layers=TODAY):
        code, lines = run(files, layers)
        self.assertEqual(code, 1, lines)
        problems = [line for line in lines if not line.startswith("check_layers:")]
        self.assertEqual(len(problems), 1, lines)
        self.assertTrue(problems[0].startswith(expected), f"{problems[0]!r} does not start with {expected!r}")
        self.assertIn("check_layers: ", lines[-1])
        self.assertIn("1 problem(s)", lines[-1])

    def test_good_tree_passes(self):
        code, lines = run(GOOD)
        self.assertEqual(code, 0, lines)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("0 problem(s)", lines[0])

    def test_lower_common_layer_including_a_higher_one_fails_with_file_and_line(self):
        # line 1 is a comment, 2 the pragma, 3 the first include
        self.assert_fails_with(
            with_file("common/util/log.h", '"common/util/status.h"', '"common/kv/kv_codec.h"'),
            "common/util/log.h:4: includes common/kv/kv_codec.h: common/util is below common/kv")

    def test_relative_include_resolves_beside_the_file(self):
        self.assert_fails_with(with_file("common/model/spec.cc", '"spec.h"', '"../engine/engine.h"'),
                               "common/model/spec.cc:4: includes common/engine/engine.h: common/model is below")

    def test_common_never_includes_the_programs(self):
        for top in ("edge_decode/edge_service.h", "cloud_prefill/cuda/ops.h", "tools/cli/flags.h"):
            with self.subTest(top=top):
                self.assert_fails_with(with_file("common/rpc/channel.cc", f'"{top}"'),
                                       f"common/rpc/channel.cc:3: includes {top}: common/ never includes")

    def test_edge_and_cloud_never_include_each_other_nor_tools(self):
        self.assert_fails_with(with_file("edge_decode/link.cc", '"cloud_prefill/prefill_service.cc"'),
                               "edge_decode/link.cc:3: includes cloud_prefill/prefill_service.cc: "
                               "edge_decode/ and cloud_prefill/ never include each other")
        self.assert_fails_with(with_file("cloud_prefill/x.cc", '"edge_decode/edge_service.h"'),
                               "cloud_prefill/x.cc:3: includes edge_decode/edge_service.h")
        self.assert_fails_with(with_file("cloud_prefill/x.cc", '"tools/cli/flags.h"'),
                               "cloud_prefill/x.cc:3: includes tools/cli/flags.h: cloud_prefill/ never includes tools/")

    def test_cli_never_includes_cloud_prefill_nor_cuda(self):
        self.assert_fails_with(with_file("tools/cli/cmd_x.cc", '"cloud_prefill/cuda/ops.h"'),
                               "tools/cli/cmd_x.cc:3: includes cloud_prefill/cuda/ops.h: tools/cli/ never includes")
        for header in ("<cuda_runtime.h>", "<cublas_v2.h>", "<thrust/device_vector.h>", '"cuda.h"'):
            with self.subTest(header=header):
                self.assert_fails_with(with_file("tools/cli/cmd_x.cc", "<string>", header),
                                       f"tools/cli/cmd_x.cc:4: includes {header}: tools/cli/ never includes a CUDA")

    def test_common_folder_missing_from_the_layers_file_fails(self):
        self.assert_fails_with(with_file("common/newthing/a.h", '"common/util/status.h"'),
                               "common/newthing/: not in the layers file")
        self.assert_fails_with(with_file("common/loose.h"), "common/loose.h: directly in common/")

    def test_target_order_of_issue_18(self):
        moved = {path.replace("common/kv/", "common/kv_codec/"): incs for path, incs in GOOD.items()}
        moved = {path: [i.replace("common/kv/", "common/kv_codec/") for i in incs] for path, incs in moved.items()}
        moved["common/kv_codec/kv_codec.h"] = ['"common/model/spec.h"', '"common/util/status.h"']
        moved["common/kv_cache/kv_cache.h"] = ['"common/kv_codec/kv_codec.h"']
        moved["common/engine/engine.h"].append('"common/kv_cache/kv_cache.h"')
        moved["common/kv_stream/kv_stream.h"] = ['"common/engine/engine.h"', '"common/kv_codec/kv_codec.h"']
        code, lines = run(moved, TARGET)
        self.assertEqual(code, 0, lines)
        # today's edge kv -> engine is an upward edge in the target order
        moved["common/kv_codec/kv_codec.h"].append('"common/engine/engine.h"')
        self.assert_fails_with(moved, "common/kv_codec/kv_codec.h:5: includes common/engine/engine.h: "
                               "common/kv_codec is below common/engine", TARGET)

    def test_layers_file_forms(self):
        with tempfile.TemporaryDirectory() as root:
            path = os.path.join(root, "layers.txt")
            for text in ("# c\nutil < gguf\n< cpu  # tail\n", "common/util\ncommon/gguf/\ncpu\n", "util gguf cpu"):
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                self.assertEqual(check_layers.read_layers(path), ["util", "gguf", "cpu"], text)
            with open(path, "w", encoding="utf-8") as f:
                f.write("util < gguf < util\n")
            with self.assertRaisesRegex(ValueError, "'util' is listed twice"):
                check_layers.read_layers(path)

    def test_usage_errors_exit_2(self):
        code, lines = run(GOOD, layers="# nothing\n")
        self.assertEqual(code, 2, lines)
        self.assertIn("no layers listed", lines[0])


if __name__ == "__main__":
    unittest.main()
