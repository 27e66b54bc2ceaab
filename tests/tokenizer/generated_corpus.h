// A deterministic corpus of hard cases for tokenizer comparison: code, JSON, CJK, emoji with skin
// tones / ZWJ sequences / flags, RTL text, combining marks, control characters, unusual white space,
// very long runs, mixed newlines. Only characters of Unicode <= 13 are used, so PCRE2 10.42
// (Unicode 14 tables) and Node's ICU agree on every character's category.
#pragma once

#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

namespace ds4::tok::testing {

struct Case {
  std::string name;
  std::string text;
};

inline const std::vector<std::pair<std::string, std::vector<std::string>>>& corpus_fragments() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> f = {
      {"code",
       {"#include <vector>\nint main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
        "def f(x):\n    \"\"\"Docstring.\"\"\"\n    return {k: v**2 for k, v in x.items() if v != None}  # comment\n",
        "const re = /^[a-z]+\\d*$/gi; let s = `${a}+${b}`; x ?" "?= y?.z ?" "? 0; // done\r\n",
        "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%ann%';\n",
        "<div class=\"a\"><p>Hello &amp; goodbye</p></div>\n",
        "if (a<b && c>=d) { x[i] = y->z; } else if (!p) q--; /* C */\n",
        "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 4]); Ok(()) }\n",
        "    \t  mixed_indent = True\n\n\n    pass\n", "printf(\"%d\\n\", i);\n",
        "$ ls -la | grep '^d' > /tmp/out.txt 2>&1 && echo \"ok\"\n",
        "snake_case camelCase PascalCase kebab-case SCREAMING_CASE __dunder__ x1y2z3 don't I'll we're\n",
        "https://example.com/path/to?q=1&r=%20x#frag user@host.org\n", "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=6;g>>=7;h&=8;i|=9;j^=10;\n",
        "@decorator\nclass A(B, metaclass=M):\n\tpass\r\n"}},
      {"json",
       {"{\"name\": \"ds4\", \"version\": [0, 1, 0], \"ok\": true, \"pi\": 3.14159, \"neg\": -2.5e-10, \"nested\": {\"a\": null, \"b\": [\"x\", \"y\"]}}",
        "[{\"id\":1,\"tags\":[\"a\",\"b\"]},{\"id\":22,\"text\":\"caf\\u00e9 \\\"quoted\\\"\"}]\n",
        "{\n  \"key\": \"value\",\n  \"emoji\": \"\xF0\x9F\x98\x80\",\n  \"cjk\": \"\xE4\xB8\xAD\xE6\x96\x87\"\n}\n",
        "{\"a\":{\"b\":{\"c\":{\"d\":[[[[1]]]]}}}}"}},
      {"cjk",
       {"你好，世界！今天天气很好。我们一起去公园散步吧？", "日本語のテキスト、ひらがなとカタカナ。東京タワーは高い。",
        "한국어 문장입니다. 안녕하세요!", "「引用」『二重』（括弧）【見出し】〜ー・", "繁體中文測試：龍、龜、鬱。",
        "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３", "中文English混合123测试abc。", "𠀀𠀁 extension B 𪚥"}},
      {"emoji",
       {"😀 😃 😄 👍 👍🏻 👍🏽 👍🏿 👋🏼", "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🏴‍☠️ pirate",
        "flags: 🇯🇵🇮🇹🇺🇸🇪🇺 🇩🇪", "❤️ ☺️ ✔️ 1️⃣ #️⃣ ©️ ™️", "🚀🔥💯🎉✨ text🙂mixed", "🤷‍♀️🤦🏾‍♂️"}},
      {"rtl",
       {"مرحبا بالعالم! هذا نص عربي، مع أرقام ١٢٣٤٥ وعلامات؟", "שָׁלוֹם עוֹלָם — עברית עם ניקוד.",
        "فارسی: سلام دنیا ۱۲۳", "mixed \u200FRTL\u200E marks: abc \u202Bעברית\u202C def"}},
      {"marks",
       {"e\u0301 a\u0308 o\u0302\u0323 n\u0303", "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032D\u0308\u0307l\u036E\u0312\u036B",
        "नमस्ते दुनिया, हिन्दी में लिखा।", "สวัสดีชาวโลก ภาษาไทย", "Ελληνικά: καλημέρα κόσμε; Кириллица: привет, мир!",
        "Ǆ ǅ ǆ ß ẞ İ ı ŉ ﬁ ﬂ", "\u0301leading mark, a\u20DD enclosed"}},
      {"control",
       {std::string("\x00\x01\x02 control \x07\x08 bell \x1b[31mred\x1b[0m \x7f del", 38),  // 38 bytes: embedded NUL
        "\u0085 next line \u2028 line sep \u2029 para sep", "zero\u200Bwidth\u200C\u200Djoiners x\uFEFFbom \u00ADsoft\u00ADhyphen",
        "nbsp\u00A0here em\u2003space thin\u2009space ideographic\u3000space narrow\u202Fnbsp \u180Emongolian",
        "\v vertical tab \f form feed", "\x1f\x1e\x1d\x1c separators"}},
      {"numbers",
       {"3.14159 2,718,281 1e-10 0x1F 0b1010 -42 +7 ½ ¾ ² ³ ① ② Ⅻ ⅓", "∑∫√∞≠≤≥±×÷ € £ ¥ ₹ ₿ ° ‰ § ¶ † ‡ • … ‹›«»“”‘’",
        "→ ← ↑ ↓ ⇒ ⇔ ∀∃∈∉⊂⊃∪∩", "2026-11-29T08:43:00Z 12:34:56.789 v1.2.3-rc.4+build.5"}},
      {"newlines",
       {"line1\r\nline2\rline3\nline4\n\rline5\r\r\n\n\nend", " \n \n\t\n", "a\r\nb\r\n\r\n\r\nc", "x \r\n y\t\r\n\tz"}},
  };
  return f;
}

inline std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

/// Named single fragments, very long runs, then `n_mixed` seeded random mixtures of fragments.
inline std::vector<Case> generated_cases(int n_mixed = 1500) {
  std::vector<Case> cases;
  std::vector<const std::string*> all;
  for (const auto& [cat, list] : corpus_fragments()) {
    for (size_t i = 0; i < list.size(); ++i) {
      cases.push_back({fmt::format("{}#{}", cat, i), list[i]});
      all.push_back(&list[i]);
    }
  }
  const std::pair<const char*, std::string> runs[] = {
      {"spaces+x", repeat(" ", 3000) + "x"},   {"newlines", repeat("\n", 1000)},
      {"tabs+y", repeat("\t", 500) + "y"},     {"digits", repeat("1234567890", 300)},
      {"equals", repeat("=", 2000)},           {"arrow", repeat("-", 1500) + ">"},
      {"punct", repeat(".!?", 500)},           {"letters", repeat("a", 4000)},
      {"cjk", repeat("中", 2000)},             {"emoji", repeat("😀", 1000)},
      {"space-newline", repeat(" \n", 500)},   {"crlf+z", repeat("\r\n", 800) + "z"},
      {"mixed-ws", repeat("  \t \n\r\n  ", 200)}, {"nbsp", repeat("\u00A0", 700) + "b"},
      {"ideographic-space", repeat("\u3000", 600) + "c"}, {"marks", fmt::format("o{}", repeat("\u0301", 800))},
      {"dots-newlines", repeat("...\n", 400)},  {"spaces-punct", repeat("  ,", 700)},
  };
  for (const auto& [name, text] : runs) cases.push_back({fmt::format("run:{}", name), text});
  const std::string seps[] = {"", " ", "  ", "\n", "\r\n", "\t", " \n", "\n\n", "\u3000", "\u00A0"};
  std::mt19937 rng(20261129);
  for (int i = 0; i < n_mixed; ++i) {
    std::string text;
    const int parts = 1 + static_cast<int>(rng() % 10);
    for (int p = 0; p < parts; ++p) {
      if (p) text += seps[rng() % std::size(seps)];
      text += *all[rng() % all.size()];
    }
    cases.push_back({fmt::format("mixed#{}", i), std::move(text)});
  }
  return cases;
}

}  // namespace ds4::tok::testing
