#include "common/model/arch/arch.h"

namespace baton {

const ArchTraits* find_arch_traits(std::string_view name) {
  for (const ArchTraits* traits : {&llama_arch_traits(), &qwen2_arch_traits(), &qwen3_arch_traits(),
                                    &phi3_arch_traits(), &gemma3_arch_traits()}) {
    if (traits->name == name) return traits;
  }
  return nullptr;
}

std::vector<std::string> supported_arch_names() {
  return {std::string(llama_arch_traits().name), std::string(qwen2_arch_traits().name),
          std::string(qwen3_arch_traits().name), std::string(phi3_arch_traits().name),
          std::string(gemma3_arch_traits().name)};
}

}  // namespace baton
