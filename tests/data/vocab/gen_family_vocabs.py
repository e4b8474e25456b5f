#!/usr/bin/env python3
"""Writes the vocab-only GGUF files of the model families Baton reads
(tests/data/vocab/README.md, "Family vocabularies"):

  gemma3-like.gguf     SentencePiece (llama) like Gemma 3: no space prefix,
                       byte fallback, Gemma 3's special tokens at their ids
  phi3-like.gguf       SentencePiece (llama) like Phi-3: Llama 2 layout with
                       Phi-3's added tokens at ids 32000-32063
  qwen3-like.gguf      byte-level BPE (gpt2, pre qwen2) like Qwen3, with its
                       added tokens in Qwen3's order right after the merges
  llama32-like.gguf    byte-level BPE (gpt2, pre llama-bpe) like Llama 3.2,
                       1024 tokens: its 256 special tokens in Llama 3's order
                       at 768-1023 (Llama 3.2: 128000-128255), its chat template

The normal pieces are few and made up (prefix chains of a short word list),
so expected tokenizations can be worked out by hand. Standard library only;
deterministic: running it again gives the same bytes.
usage: gen_family_vocabs.py [OUT_DIR]   (default: this script's folder)
"""
import os
import struct
import sys

# GGUF value types
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPM_SPACE = "\u2581"


def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def gguf_value(kind, value):
    if kind == U32:
        return struct.pack("<I", value)
    if kind == I32:
        return struct.pack("<i", value)
    if kind == BOOL:
        return struct.pack("<B", 1 if value else 0)
    if kind == STRING:
        return gguf_string(value)
    elem_kind, items = value
    out = struct.pack("<IQ", elem_kind, len(items))
    for item in items:
        out += gguf_value(elem_kind, item) if elem_kind != F32 else struct.pack("<f", item)
    return out


def write_gguf(path, metadata):
    """metadata: list of (key, kind, value); ARRAY values are (elem_kind, items)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata))
    for key, kind, value in metadata:
        out += gguf_string(key) + struct.pack("<I", kind) + gguf_value(kind, value)
    with open(path, "wb") as f:
        f.write(out)


def prefix_chain(words):
    """Every prefix (in characters) of every word, each once, in first-seen order."""
    seen, out = set(), []
    for word in words:
        for end in range(1, len(word) + 1):
            piece = word[:end]
            if piece not in seen:
                seen.add(piece)
                out.append(piece)
    return out


SPM_WORDS = ["Hello", SPM_SPACE + "Hello", "world", SPM_SPACE + "world", SPM_SPACE + "the", "The",
             SPM_SPACE + "model", SPM_SPACE + "is", SPM_SPACE + "a", "caf", SPM_SPACE + "caf", "\u00e9",
             SPM_SPACE + "\u4e2d\u6587", "\u4e2d\u6587", SPM_SPACE * 2, SPM_SPACE * 4, ".", ",", "!", "?",
             ":", "'", "-", "\n", "\n\n"]


def spm_pieces(words):
    """Single characters first (a-z, A-Z, 0-9), then the prefix chains; the
    score favours longer pieces (a merge that makes a longer piece wins)."""
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
            [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [str(d) for d in range(10)]
    pieces = chars + [p for p in prefix_chain(words) if p not in chars]
    return [(p, -1000.0 + 10.0 * len(p) - 0.001 * i) for i, p in enumerate(pieces)]


def byte_tokens():
    return [("<0x%02X>" % b, 0.0, BYTE) for b in range(256)]


def spm_metadata(arch, tokens, extra):
    return [
        ("general.architecture", STRING, arch),
        ("tokenizer.ggml.model", STRING, "llama"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, [t[0] for t in tokens])),
        ("tokenizer.ggml.scores", ARRAY, (F32, [t[1] for t in tokens])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [t[2] for t in tokens])),
    ] + extra


def gemma3():
    # Gemma 3's low ids: <pad> <eos> <bos> <unk> <mask> [multimodal], unused
    # slots, then <start_of_turn>=105 <end_of_turn>=106.
    tokens = [("<pad>", 0.0, CONTROL), ("<eos>", 0.0, CONTROL), ("<bos>", 0.0, CONTROL),
              ("<unk>", 0.0, UNKNOWN), ("<mask>", 0.0, USER_DEFINED), ("[multimodal]", 0.0, CONTROL)]
    tokens += [("<unused%d>" % i, 0.0, CONTROL) for i in range(105 - len(tokens))]
    tokens += [("<start_of_turn>", 0.0, CONTROL), ("<end_of_turn>", 0.0, CONTROL)]
    assert tokens[105][0] == "<start_of_turn>" and tokens[106][0] == "<end_of_turn>"
    tokens += byte_tokens()
    tokens += [(p, s, NORMAL) for p, s in spm_pieces(SPM_WORDS)]
    tokens += [("<start_of_image>", 0.0, USER_DEFINED), ("<end_of_image>", 0.0, USER_DEFINED)]
    return spm_metadata("gemma3", tokens, [
        ("tokenizer.ggml.bos_token_id", U32, 2),
        ("tokenizer.ggml.eos_token_id", U32, 1),
        ("tokenizer.ggml.unknown_token_id", U32, 3),
        ("tokenizer.ggml.padding_token_id", U32, 0),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.ggml.add_eos_token", BOOL, False),
        ("tokenizer.ggml.add_space_prefix", BOOL, False),
        ("tokenizer.chat_template", STRING, GEMMA3_TEMPLATE),
    ])


def phi3():
    # Llama 2's layout (<unk> <s> </s>, 256 byte tokens, pieces), unused
    # fillers up to 32000, then Phi-3's added tokens at their ids.
    tokens = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)] + byte_tokens()
    tokens += [(p, s, NORMAL) for p, s in spm_pieces(SPM_WORDS)]
    tokens += [("<filler%d>" % i, 0.0, UNUSED) for i in range(32000 - len(tokens))]
    added = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
             "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"]
    added += ["<|placeholder%d|>" % i for i in range(7, 7 + 32064 - 32000 - len(added))]
    tokens += [(t, 0.0, CONTROL) for t in added]
    assert len(tokens) == 32064 and tokens[32007][0] == "<|end|>" and tokens[32010][0] == "<|user|>"
    return spm_metadata("phi3", tokens, [
        ("general.name", STRING, "Phi3"),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 32000),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
        ("tokenizer.ggml.padding_token_id", U32, 32000),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
        ("tokenizer.ggml.add_eos_token", BOOL, False),
        ("tokenizer.chat_template", STRING, PHI3_TEMPLATE),
    ])


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode: byte b -> the character standing for it."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


BPE_WORDS = [" Hello", "Hello", " world", " the", " The", " model", " is", " a", " system", " user",
             " assistant", "system", "user", "assistant", "\n\n", " Today", " Date", " Cutting",
             " Knowledge", " December", "Cut", "ting", " think", "think", " answer"]


def bpe_vocab(words, n_normal=None):
    """256 byte tokens in byte order, then left-to-right merges that build each
    word of `words` (UTF-8 bytes shown in GPT-2's alphabet)."""
    alphabet = byte_level_alphabet()
    tokens = [alphabet[b] for b in range(256)]
    merges, known = [], set(tokens)
    for word in words:
        shown = [alphabet[b] for b in word.encode("utf-8")]
        left = shown[0]
        for right in shown[1:]:
            merged = left + right
            if merged not in known:
                known.add(merged)
                tokens.append(merged)
                merges.append(left + " " + right)
            left = merged
    if n_normal is not None:
        assert len(tokens) <= n_normal, len(tokens)
        # Two-letter merges of lowercase letters fill the rest (inert for the tests).
        letters = "etaoinshrdlucmfwypvbgkjqxz"
        for a in letters:
            for b in letters:
                if len(tokens) == n_normal:
                    break
                if a + b not in known:
                    known.add(a + b)
                    tokens.append(a + b)
                    merges.append(a + " " + b)
    return tokens, merges


def bpe_metadata(arch, pre, tokens, types, merges, extra):
    return [
        ("general.architecture", STRING, arch),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, pre),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
    ] + extra


def qwen3():
    tokens, merges = bpe_vocab(BPE_WORDS)
    types = [NORMAL] * len(tokens)
    base = len(tokens)  # Qwen3: 151643
    # (text, type) in Qwen3's order 151643..151668; "special": false ones are user-defined.
    added = [("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),
             ("<|object_ref_start|>", CONTROL), ("<|object_ref_end|>", CONTROL), ("<|box_start|>", CONTROL),
             ("<|box_end|>", CONTROL), ("<|quad_start|>", CONTROL), ("<|quad_end|>", CONTROL),
             ("<|vision_start|>", CONTROL), ("<|vision_end|>", CONTROL), ("<|vision_pad|>", CONTROL),
             ("<|image_pad|>", CONTROL), ("<|video_pad|>", CONTROL), ("<tool_call>", USER_DEFINED),
             ("</tool_call>", USER_DEFINED), ("<|fim_prefix|>", USER_DEFINED), ("<|fim_middle|>", USER_DEFINED),
             ("<|fim_suffix|>", USER_DEFINED), ("<|fim_pad|>", USER_DEFINED), ("<|repo_name|>", USER_DEFINED),
             ("<|file_sep|>", USER_DEFINED), ("<tool_response>", USER_DEFINED),
             ("</tool_response>", USER_DEFINED), ("<think>", USER_DEFINED), ("</think>", USER_DEFINED)]
    tokens += [t for t, _ in added]
    types += [k for _, k in added]
    return bpe_metadata("qwen3", "qwen2", tokens, types, merges, [
        ("tokenizer.ggml.eos_token_id", U32, base + 2),      # <|im_end|>
        ("tokenizer.ggml.padding_token_id", U32, base),      # <|endoftext|>
        ("tokenizer.ggml.bos_token_id", U32, base),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
        ("tokenizer.chat_template", STRING, QWEN3_TEMPLATE),
    ])


def llama32():
    n_vocab, n_special = 1024, 256
    tokens, merges = bpe_vocab(BPE_WORDS, n_normal=n_vocab - n_special)
    types = [NORMAL] * len(tokens)
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    specials = named + ["<|reserved_special_token_%d|>" % i for i in range(3, 3 + n_special - len(named))]
    base = len(tokens)
    tokens += specials
    types += [CONTROL] * len(specials)
    assert len(tokens) == n_vocab and tokens[base + 9] == "<|eot_id|>"
    return bpe_metadata("llama", "llama-bpe", tokens, types, merges, [
        ("tokenizer.ggml.bos_token_id", U32, base),       # <|begin_of_text|>
        ("tokenizer.ggml.eos_token_id", U32, base + 9),   # <|eot_id|>, as Llama-3.2 Instruct GGUFs
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.chat_template", STRING, LLAMA32_TEMPLATE),
    ])


# Excerpts of the published templates: the parts Baton's detection and
# rendering follow (full templates: the models' tokenizer_config.json).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {{ message['content'] | trim }}\n    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n")
PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
QWEN3_TEMPLATE = (
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "            {%- if '</think>' in message.content %}\n"
    "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")
LLAMA32_TEMPLATE = (
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n"
    "        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n"
    "        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- system_message }}\n{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim"
    " + '<|eot_id|>' }}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, build in [("gemma3-like", gemma3), ("phi3-like", phi3), ("qwen3-like", qwen3),
                        ("llama32-like", llama32)]:
        write_gguf(os.path.join(out_dir, name + ".gguf"), build())


if __name__ == "__main__":
    main()
