// The prompt input flags that `baton generate` (both modes) and `baton pack
// build` share: --prompt TEXT (also -p), --prompt-file F (- reads standard
// input), --prompt-tokens IDS. One registration, one reading, one set of
// error messages for all three.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "command_status.h"

namespace baton::cli {

struct PromptFlags {
  std::string text, file, tokens;
};

// The help of the three flags in the command's words; the file flag's help
// gets "; - reads standard input" appended.
struct PromptFlagHelp {
  std::string text, file, tokens;
};

// Registers --prompt, --prompt-file and --prompt-tokens bound to `*out`.
void add_prompt_flags(FlagSet& flags, PromptFlags* out, const PromptFlagHelp& help);

// `args` with every "-p" spelled "--prompt" (the FlagSet knows long names only).
Args with_prompt_short_flag(const Args& args);

// The prompt the flags give: its text, or its token ids when --prompt-tokens
// is given (then `text` is empty).
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
};

// Reads the prompt. Usage errors of `command` ("generate", "pack build"):
// more than one source given, none when `required`, an id in --prompt-tokens
// that is not a non-negative integer. A failure: the file cannot be read or
// is empty. With nothing given (and not required) an empty PromptInput.
absl::StatusOr<PromptInput> read_prompt(const PromptFlags& flags, const std::string& command, bool required);

// The text of --prompt-file PATH; "-" reads standard input to its end.
absl::StatusOr<std::string> read_prompt_file(const std::string& path);

}  // namespace baton::cli
