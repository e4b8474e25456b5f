#pragma once
// A decompression bomb for fault tests: a small zstd frame that expands to
// `bytes` zeros and declares that content size, made in 1 MiB steps so the
// test itself never holds the expanded bytes (256 MiB -> about 8 KiB).
#include <zstd.h>

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace baton {

inline std::string zstd_bomb(size_t bytes) {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setPledgedSrcSize(ctx.get(), bytes);
  const std::string zeros(size_t{1} << 20, '\0');
  std::string out;
  std::string buffer(ZSTD_CStreamOutSize(), '\0');
  for (size_t done = 0; done < bytes; done += zeros.size()) {
    const bool last = done + zeros.size() >= bytes;
    const size_t step = last ? bytes - done : zeros.size();
    ZSTD_inBuffer in{zeros.data(), step, 0};
    size_t remaining = 0;
    do {
      ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
      remaining = ZSTD_compressStream2(ctx.get(), &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
      EXPECT_FALSE(ZSTD_isError(remaining)) << ZSTD_getErrorName(remaining);
      if (ZSTD_isError(remaining)) return out;
      out.append(buffer.data(), o.pos);
    } while (last ? remaining != 0 : in.pos < in.size);
  }
  return out;
}

}  // namespace baton
