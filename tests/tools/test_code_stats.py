#!/usr/bin/env python3
"""Tests of code_stats.py: the function finder on tricky C++ (constructor
initialiser lists, raw strings, lambdas, templates, extern "C", CUDA kernels,
test macros) and the three reports on a small temporary tree. ctest runs it
(tools.code_stats_test); by hand: python3 tests/tools/test_code_stats.py"""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import code_stats  # noqa: E402

TRICKY = r'''#include "x.h"
#define BODY(a) \
  { a; }
namespace baton {
namespace {
constexpr int kTable[] = {1, 2, 3};
const char* kPage = R"html(<a href="{x}">}</a>)html";
struct Foo final : public Bar {
  Foo(int a) : a_(a), b_{a, 2}, c_(std::vector<int>{1}) {
    if (a) { x('}'); }
  }
  int get() const { return a_; }
  int a_ = 0;
};
}  // namespace

template <typename T>
absl::StatusOr<T> Thing<T>::make(int n) noexcept {
  auto f = [&](int k) { return k + 1'000; };  // }
  /* } */
  return T{};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return 0;
}

TEST_F(Suite, Name) {
  EXPECT_EQ(1, 1);
}
INSTANTIATE_TEST_SUITE_P(All, P, ::testing::Values(Case{"a", 1}),
                         [](const auto& info) { return info.param.name; });

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) kernel(T* p) {
  p[0] = 1;
}
}  // namespace baton
'''


class FunctionsTest(unittest.TestCase):
    def test_tricky_file(self):
        found = [(start, end, name) for start, end, name, _ in code_stats.functions(TRICKY)]
        self.assertEqual(found, [
            (9, 11, "Foo::Foo"),
            (12, 12, "Foo::get"),
            (17, 22, "Thing<T>::make"),
            (24, 26, "LLVMFuzzerTestOneInput"),
            (28, 30, "TEST_F(Suite, Name)"),
            (34, 37, "kernel"),
        ])

    def test_code_lines_leave_out_comments_and_blanks(self):
        (_, _, name, code), = code_stats.functions("int f() {\n  // a comment\n\n  return 1;\n}\n")
        self.assertEqual((name, code), ("f", 3))


class ReportTest(unittest.TestCase):
    def test_reports_on_a_small_tree(self):
        with tempfile.TemporaryDirectory() as root:
            files = {
                "common/util/a.h": "#pragma once\nint a();\n",
                "common/kv/b.cc": '#include "common/engine/e.h"\nint b() {\n  return 1;\n}\n',
                "common/engine/e.h": "#pragma once\n",
                "tools/x.py": "print(1)\n",
                "tools/notes.md": "not code\n",
                "build/gen.cc": "int skipped() {\n}\n",
            }
            for path, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text)
            layers = os.path.join(root, "layers.txt")
            with open(layers, "w", encoding="utf-8") as f:
                f.write("util < engine < kv\n")
            mapping = os.path.join(root, "map.txt")
            with open(mapping, "w", encoding="utf-8") as f:
                f.write("common/kv/b common/codec/b\n")

            def run(*extra):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.assertEqual(code_stats.main(["--root", root, "--layers", layers, "--json", *extra]), 0)
                return json.loads(out.getvalue())

            report = run()
            self.assertEqual({e["folder"]: e["lines"] for e in report["lines_per_folder"]},
                             {"common/util": 2, "common/kv": 4, "common/engine": 1, "tools": 1})
            self.assertEqual(report["lines_total"], 8)
            self.assertEqual([(f["name"], f["lines"]) for f in report["longest_functions"]], [("b", 3)])
            self.assertEqual(report["layers"]["upward_edges"], 0)
            with open(layers, "w", encoding="utf-8") as f:
                f.write("util < codec < engine < kv\n")
            moved = run("--map", mapping)["layers"]
            self.assertEqual(moved["upward_edges"], 1)
            self.assertEqual((moved["edges"][0]["file"], moved["edges"][0]["line"]), ("common/kv/b.cc", 1))


if __name__ == "__main__":
    unittest.main()
