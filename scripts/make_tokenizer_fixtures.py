#!/usr/bin/env python3
"""Golden data for loom's tokenizer tests, computed by the HF reference.

Trains small tokenizers of each kind loom supports with the HF `tokenizers`
library (vocab ~1000, on a varied generated corpus), saves each as
tests/fixtures/tokenizer/<name>/{tokenizer.json, tokenizer_config.json,
expected.json}; expected.json holds HF's ids and decodes for CORPUS.

    pip install tokenizers transformers
    python3 scripts/make_tokenizer_fixtures.py              # trained fixtures
    python3 scripts/make_tokenizer_fixtures.py --skip-trained \
        --gguf models/qwen2.5-coder-0.5b-instruct.gguf --name qwen2.5-coder-0.5b
        # + tests/fixtures/tokenizer/gguf_qwen2.json: ids HF transformers gives for
        #   CORPUS with the tokenizer it builds from that GGUF (needs `pip install gguf`)
    python3 scripts/make_tokenizer_fixtures.py --nfc-tables
        # regenerates src/tokenizer/unicode_nfc_data.cpp (NFC tables)

The corpora are seeded; the HF BPE trainer may still order equal-count merges
differently from run to run, so a rerun can change a vocabulary -- its
expected.json is always recomputed with it, so the pair stays consistent.
"""
import argparse
import json
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SP = "\u2581"

# Strings every fixture is checked on.
CORPUS = [
    "",
    " ",
    "Hello, world!",
    "hello world",
    " Hello world",
    "  leading spaces and trailing   ",
    "The quick brown fox jumps over the lazy dog.",
    "It's 5 o'clock; we'll see what they've done. I'M SURE YOU'D AGREE, DON'T YOU?",
    "Numbers: 0 7 42 1234 3.14159 1,000,000 and 123456789012345678901234567890",
    "Tabs\tand\ttabs\t\tdouble, newlines\n\nand\r\nCRLF\n\n\n   \n  end",
    "    indented code\n\tfoo()\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot product",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "https://example.com/path?query=1&x=y#frag and user@example.org",
    "你好，世界！今天天气很好。我们一起去公园散步吧。",
    "日本語のテキスト：こんにちは、元気ですか？カタカナとひらがな。",
    "مرحبا بالعالم! هذا نص باللغة العربية.",
    "Mixed: English 中文 日本語 العربية Русский Ελληνικά हिन्दी 한국어",
    "Emoji: 😀 🎉 👍🏽 🇫🇷 ❤️ 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍🚀",
    "Combining: e\u0301 a\u0308 n\u0303 \u1e9b\u0323 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f",
    "RTL mark \u200f and LRM \u200e zero width \u200b joiner \u200d BOM \ufeff",
    "Replacement char \ufffd and private use \ue000 and astral \U0001d11e \U00010348",
    "Special: <|endoftext|> inside text",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<s>[INST] hello [/INST]</s>",
    "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<think>reasoning</think> answer <tool_call>{}</tool_call>",
    "<|im_start|><|im_end|><|endoftext|>",
    "a" * 300,
    " ".join(["word"] * 50),
    "!!!???...,,,;;;:::---___===+++",
    "ÀÉÎÕÜ àéîõü ßæøå ÇÑ çñ œŒ",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "x" + "\u00a0" * 3 + "nbsp\u3000ideographic\u2003em",
    "1\n2\n3\n\n\n\n4",
    "tab\t\t\t\tafter",
    "unknown rare chars: \u16a0\u16a1 \u0f00 \u2c00 \U0001f9ec",
]


def random_corpus(count=80):
    """Seeded random strings mixing scripts, whitespace runs, marks and specials."""
    rng = random.Random(7)
    words = ["the", "The", "THE", "don't", "it's", "We'LL", "hello", "world", "token", "x", "_id", "fooBar"]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<bos>", "<end_of_turn>",
                "<|eot_id|>", "<think>", "<tool_call>", "<unk>", "<0x41>"]
    spaces = [" ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n ", "\u3000", "\u00a0", "\u2003", "\x0b"]

    def char_from(lo, hi):
        return chr(rng.randint(lo, hi))

    makers = [
        lambda: rng.choice(words),
        lambda: rng.choice(spaces),
        lambda: rng.choice(specials),
        lambda: str(rng.randint(0, 10 ** rng.randint(1, 12))),
        lambda: "".join(rng.choice("!@#$%^&*()[]{};:'\",.<>/?\\|`~-_=+") for _ in range(rng.randint(1, 4))),
        lambda: "".join(char_from(0x4E00, 0x9FFF) for _ in range(rng.randint(1, 5))),
        lambda: "".join(char_from(0x3041, 0x30FF) for _ in range(rng.randint(1, 5))),
        lambda: "".join(char_from(0x0621, 0x064A) for _ in range(rng.randint(1, 6))),
        lambda: "".join(char_from(0xAC00, 0xD7A3) for _ in range(rng.randint(1, 3))),
        lambda: rng.choice("aeiouAEIOU") + "".join(char_from(0x0300, 0x036F) for _ in range(rng.randint(1, 3))),
        lambda: char_from(0x1F300, 0x1FAFF) + rng.choice(["", "\U0001F3FD", "\uFE0F", "\u200D" + char_from(0x1F466, 0x1F469)]),
        lambda: char_from(0x00C0, 0x024F) + char_from(0x0370, 0x03FF) + char_from(0x0400, 0x04FF),
        lambda: char_from(0x10000, 0x10FFFD) if rng.random() < 0.5 else char_from(0xE000, 0xF8FF),
    ]
    out = []
    for _ in range(count):
        parts = [rng.choice(makers)() for _ in range(rng.randint(1, 14))]
        text = "".join(p + (" " if rng.random() < 0.5 else "") for p in parts)
        out.append("".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF))
    return out


def training_corpus():
    rng = random.Random(1234)
    english = [
        "The quick brown fox jumps over the lazy dog.",
        "A tokenizer turns text into numbers that a language model can read.",
        "It's raining today, but we'll go out anyway; they've said it's fine.",
        "Inference servers batch requests together to keep the accelerator busy.",
        "She sells sea shells by the sea shore, and the shells she sells are surely seashells.",
        "In 1969, humans first walked on the Moon; by 2024 many more missions followed.",
        "Please write a short poem about autumn leaves falling in the park.",
        "What is the capital of France? The capital of France is Paris.",
        "Hello, world! Hello again, world. Goodbye, world.",
        "The user asked a question and the assistant answered it politely.",
    ]
    chinese = ["你好，世界！", "今天天气很好。", "我们一起去公园散步吧。", "机器学习和自然语言处理。",
               "这是一个测试句子。", "中国的首都是北京。"]
    japanese = ["こんにちは、元気ですか？", "日本語のテキストです。", "カタカナとひらがなを使います。",
                "東京は日本の首都です。"]
    arabic = ["مرحبا بالعالم", "هذا نص باللغة العربية", "كيف حالك اليوم؟"]
    other = ["Привет, мир! Как дела?", "Γειά σου Κόσμε", "नमस्ते दुनिया", "안녕하세요 세계",
             "Ça va? Très bien, merci. Déjà vu, naïve café.", "Straße, Größe, Übung, schön."]
    emoji = ["😀", "🎉", "👍", "👍🏽", "🇫🇷", "❤️", "👨‍👩‍👧‍👦", "🚀", "🔥", "✨"]
    code = [
        "def main():\n    print('hello')\n    return 0\n",
        "for (int i = 0; i < n; ++i) {\n  sum += a[i];\n}\n",
        "const x = {a: 1, b: [2, 3]};\nconsole.log(JSON.stringify(x));\n",
        "#include <stdio.h>\nint main(void) { return 0; }\n",
        "SELECT name, count(*) FROM users WHERE age > 21 GROUP BY name;\n",
        "if __name__ == \"__main__\":\n\tmain()\n",
        "    return self.value  # comment\n",
    ]
    lines = []
    for _ in range(1500):
        kind = rng.randrange(8)
        if kind <= 2:
            s = " ".join(rng.choice(english) for _ in range(rng.randint(1, 3)))
        elif kind == 3:
            s = "".join(rng.choice(chinese) for _ in range(rng.randint(1, 4)))
        elif kind == 4:
            s = "".join(rng.choice(japanese + arabic) for _ in range(rng.randint(1, 3)))
        elif kind == 5:
            s = rng.choice(code)
        elif kind == 6:
            s = " ".join(rng.choice(other) for _ in range(2)) + " " + "".join(rng.choice(emoji) for _ in range(3))
        else:
            s = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 9))) for _ in range(rng.randint(1, 6)))
            s += rng.choice(["\n", "\n\n", "\t", "  ", " "])
        lines.append(s)
    return lines


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


# Strings whose Unicode normal forms differ: composed letters, Hangul, and
# compatibility characters (ligatures, full-width, circled, fractions, the
# Ohm and Angstrom signs). GGUF fixtures hold each in NFC, NFD, NFKC and NFKD,
# so a tokenizer that normalises differently from transformers' GGUF loader
# shows up as a mismatch on exactly those forms.
NORMALIZATION_BASES = [
    "café résumé naïve Ångström",
    "Tiếng Việt có dấu: người, được, những",
    "한국어 텍스트 가나다",
    "ﬁne ﬂour, ＦＵＬＬ ｗｉｄｔｈ １２３, ① ② ⅷ, ½ ¾, x² H₂O",
    "Ohm Ω vs omega Ω, Kelvin K vs K, Angstrom Å vs Å",
    "ｶﾀｶﾅ half-width and ㌀ squared, ℌ ℍ ℕ",
]


def normalization_corpus():
    out = []
    for base in NORMALIZATION_BASES:
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            text = unicodedata.normalize(form, base)
            if text not in out:
                out.append(text)
    return out


def expected_cases(encode, decode, encode_unparsed, extra=()):
    cases = []
    for text in CORPUS + random_corpus() + list(extra):
        ids = encode(text, False)
        cases.append({
            "text": text,
            "ids": ids,
            "ids_special": encode(text, True),
            "ids_unparsed": encode_unparsed(text),
            "decoded": decode(ids, False),
            "decoded_skip": decode(ids, True),
        })
    return cases


def save_fixture(name, tok, config, description):
    from tokenizers import Tokenizer
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what loom reads
    write_json(os.path.join(d, "tokenizer_config.json"), config)

    def encode(text, add_special):
        tok.encode_special_tokens = False
        return tok.encode(text, add_special_tokens=add_special).ids

    def encode_unparsed(text):
        tok.encode_special_tokens = True
        ids = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        return ids

    def decode(ids, skip):
        return tok.decode(ids, skip_special_tokens=skip)

    write_json(os.path.join(d, "expected.json"), {
        "description": description,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "cases": expected_cases(encode, decode, encode_unparsed, normalization_corpus()),
    })
    print(f"{name}: vocab {tok.get_vocab_size()}", file=sys.stderr)


def byte_level_fixture(name, split_pattern, specials, extra_added, normalizer=None, ignore_merges=False,
                       bos=None, eos=None, template_bos=None):
    from tokenizers import Tokenizer, Regex, AddedToken, models, pre_tokenizers, decoders, trainers, processors
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    if split_pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials])
    tok.train_from_iterator(training_corpus(), trainer)
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in extra_added])
    if template_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{template_bos} $A", special_tokens=[(template_bos, tok.token_to_id(template_bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"bos_token": bos, "eos_token": eos, "model_max_length": 4096}
    return tok, config


def sentencepiece_fixture(prefix_space, specials, metaspace=False):
    """Llama-2 style (prefix_space) or Gemma style BPE with byte fallback."""
    from tokenizers import Tokenizer, AddedToken, models, pre_tokenizers, decoders, trainers, normalizers, processors
    # Train on ▁-marked words (as SentencePiece does), then assemble the file the
    # way converted Llama/Gemma tokenizers look: specials, 256 byte tokens, pieces.
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Replace(" ", SP)
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, show_progress=False, limit_alphabet=180)
    trainer_tok.train_from_iterator(training_corpus(), trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    pieces = sorted(trained["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for s in specials:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in pieces:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    unk = specials[0] if specials[0] == "<unk>" else "<unk>"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement=SP, prepend_scheme="first", split=False)
        # Metaspace's decoder has no byte fallback; put it in front.
        tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    elif prefix_space:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
        tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.normalizer = normalizers.Replace(" ", SP)
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
        tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def make_trained():
    from tokenizers import AddedToken, normalizers, processors

    tok, cfg = byte_level_fixture("gpt2", None, ["<|endoftext|>"], ["<think>", "</think>"],
                                  bos="<|endoftext|>", eos="<|endoftext|>")
    save_fixture("gpt2", tok, cfg, "byte-level BPE, GPT-2 pattern (ByteLevel use_regex)")

    tok, cfg = byte_level_fixture(
        "llama3", LLAMA3_PATTERN,
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], [],
        ignore_merges=True, bos="<|begin_of_text|>", eos="<|eot_id|>", template_bos="<|begin_of_text|>")
    save_fixture("llama3", tok, cfg, "byte-level BPE, Llama-3 pattern, ignore_merges, bos by post-processor")

    tok, cfg = byte_level_fixture(
        "qwen2", QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        ["<tool_call>", "</tool_call>", "<think>", "</think>"], normalizer=normalizers.NFC(),
        bos=None, eos="<|im_end|>")
    cfg["add_bos_token"] = False
    save_fixture("qwen2", tok, cfg, "byte-level BPE, Qwen2 pattern, NFC normalizer")

    llama2_specials = ["<unk>", "<s>", "</s>"]
    tok = sentencepiece_fixture(True, llama2_specials)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    save_fixture("llama2", tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                 "add_bos_token": True, "add_eos_token": False},
                 "SentencePiece-style BPE, byte fallback, Prepend+Replace normalizer (Llama 2)")

    tok = sentencepiece_fixture(True, llama2_specials, metaspace=True)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    save_fixture("llama2_metaspace", tok, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True},
                 "SentencePiece-style BPE, byte fallback, Metaspace prepend_scheme=first")

    gemma_specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    tok = sentencepiece_fixture(False, gemma_specials)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    save_fixture("gemma", tok, {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                                "unk_token": "<unk>", "add_bos_token": True},
                 "SentencePiece-style BPE, byte fallback, no prefix space (Gemma)")
    with open(os.path.join(OUT, "gemma", "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [1, 5]}, f)


def make_gguf(path, name):
    import hashlib
    from transformers import AutoTokenizer
    from gguf import GGUFReader
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    reader = GGUFReader(path)
    field = reader.fields["general.name"]
    general_name = bytes(field.parts[field.data[0]]).decode()
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path))

    def encode(text, add_special):
        return tok.encode(text, add_special_tokens=add_special)

    def encode_unparsed(text):
        return tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def decode(ids, skip):
        return tok.decode(ids, skip_special_tokens=skip)

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    out = os.path.join(OUT, f"gguf_{name}.json")
    write_json(out, {
        "description": f"HF transformers' tokenizer built from {os.path.basename(path)}",
        # The loader's version: which normaliser it applies (if any) is its choice.
        "transformers_version": __import__("transformers").__version__,
        "model_file": os.path.basename(path),
        "sha256": h.hexdigest(),
        "general_name": general_name,
        "n_vocab": n_vocab,
        "fetch": f"scripts/fetch_model.sh {name}",
        "cases": expected_cases(encode, decode, encode_unparsed, normalization_corpus()),
    })
    print(f"wrote {out}", file=sys.stderr)


def make_nfc_tables():
    """Writes src/tokenizer/unicode_nfc_data.cpp from Python's unicodedata."""
    import unicodedata as ud
    ccc_runs = []  # [start, end, class]
    decomp = []    # [cp, first, second or 0]: canonical decompositions, Hangul excluded
    compose = []   # [first, second, composite]: primary composites only
    for cp in range(0x110000):
        ch = chr(cp)
        c = ud.combining(ch)
        if c:
            if ccc_runs and ccc_runs[-1][1] == cp - 1 and ccc_runs[-1][2] == c:
                ccc_runs[-1][1] = cp
            else:
                ccc_runs.append([cp, cp, c])
        if 0xAC00 <= cp <= 0xD7A3:
            continue
        d = ud.decomposition(ch)
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        decomp.append([cp, parts[0], parts[1] if len(parts) > 1 else 0])
        if len(parts) == 2 and ud.normalize("NFC", ud.normalize("NFD", ch)) == ch:
            compose.append([parts[0], parts[1], cp])
    compose.sort(key=lambda t: (t[0], t[1]))

    def rows(items, per_line=4):
        lines = []
        for i in range(0, len(items), per_line):
            lines.append("    " + " ".join("{" + ", ".join(f"0x{v:X}" for v in it) + "}," for it in items[i:i + per_line]))
        return "\n".join(lines)

    text = f"""// Generated by scripts/make_tokenizer_fixtures.py --nfc-tables from the Unicode
// Character Database {ud.unidata_version} (Python's unicodedata). Do not edit.
#include "tokenizer/unicode_nfc_data.h"

namespace loom::tok::nfc_data {{

const CccRun kCccRuns[] = {{
{rows(ccc_runs)}
}};
const size_t kCccRunCount = sizeof(kCccRuns) / sizeof(kCccRuns[0]);

const Decomposition kDecompositions[] = {{
{rows(decomp)}
}};
const size_t kDecompositionCount = sizeof(kDecompositions) / sizeof(kDecompositions[0]);

const Composition kCompositions[] = {{
{rows(compose)}
}};
const size_t kCompositionCount = sizeof(kCompositions) / sizeof(kCompositions[0]);

}}  // namespace loom::tok::nfc_data
"""
    path = os.path.join(ROOT, "src", "tokenizer", "unicode_nfc_data.cpp")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}: {len(ccc_runs)} ccc runs, {len(decomp)} decompositions, {len(compose)} compositions",
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", help="also write gguf_<name>.json for this GGUF file")
    ap.add_argument("--name", help="fixture name for --gguf")
    ap.add_argument("--skip-trained", action="store_true", help="only the --gguf step")
    ap.add_argument("--nfc-tables", action="store_true", help="regenerate src/tokenizer/unicode_nfc_data.cpp")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.nfc_tables:
        make_nfc_tables()
        return
    if not args.skip_trained:
        make_trained()
    if args.gguf:
        if not args.name:
            ap.error("--gguf needs --name")
        make_gguf(args.gguf, args.name)


if __name__ == "__main__":
    main()
