#include "prompt_flags.h"

#include <iostream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "common/util/read_file.h"

namespace baton::cli {

void add_prompt_flags(FlagSet& flags, PromptFlags* out, const PromptFlagHelp& help) {
  flags.add_string("prompt", &out->text, help.text, "TEXT");
  flags.add_string("prompt-file", &out->file, help.file + "; - reads standard input", "FILE");
  flags.add_string("prompt-tokens", &out->tokens, help.tokens, "IDS");
}

Args with_prompt_short_flag(const Args& args) {
  Args expanded = args;
  for (std::string& arg : expanded) {
    if (arg == "-p") arg = "--prompt";
  }
  return expanded;
}

absl::StatusOr<std::string> read_prompt_file(const std::string& path) {
  std::string text;
  if (path == "-") {
    std::stringstream buffer;
    buffer << std::cin.rdbuf();
    text = buffer.str();
  } else {
    BATON_ASSIGN_OR_RETURN(text, read_file(path, "--prompt-file"));
  }
  if (text.empty()) {
    return absl::InvalidArgumentError(path == "-" ? std::string("--prompt-file -: standard input is empty")
                                                  : "--prompt-file " + path + " is empty");
  }
  return text;
}

absl::StatusOr<PromptInput> read_prompt(const PromptFlags& flags, const std::string& command, bool required) {
  const int sources = !flags.text.empty() + !flags.file.empty() + !flags.tokens.empty();
  if (sources > 1 || (required && sources == 0)) {
    return usage_error(command, absl::StrFormat("give %s one of -p TEXT, --prompt-file F, --prompt-tokens IDS",
                                                required ? "exactly" : "at most"));
  }
  PromptInput prompt;
  if (!flags.tokens.empty()) {
    for (absl::string_view part : absl::StrSplit(flags.tokens, ',')) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id) || id < 0) {
        return usage_error(command, absl::StrFormat("--prompt-tokens: '%s' is not a token id", part));
      }
      prompt.tokens.push_back(id);
    }
  } else if (!flags.file.empty()) {
    BATON_ASSIGN_OR_RETURN(prompt.text, read_prompt_file(flags.file));
  } else {
    prompt.text = flags.text;
  }
  return prompt;
}

}  // namespace baton::cli
