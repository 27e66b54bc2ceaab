#include "tokenizer/v4_added_tokens.h"

#include <array>

namespace ds4::tok {
namespace {

// "｜" is U+FF5C, "▁" is U+2581.
constexpr std::array<AddedTokenId, 48> kTokens = {{
    {128815, "<｜begin▁of▁repo▁name｜>"},
    {128816, "<｜end▁of▁repo▁name｜>"},
    {128817, "<｜begin▁of▁file▁name｜>"},
    {128818, "<｜end▁of▁file▁name｜>"},
    {128819, "<｜begin▁of▁file｜>"},
    {128820, "<｜end▁of▁file｜>"},
    {128821, "<think>"},
    {128822, "</think>"},
    {128823, "<｜place▁holder▁for▁copy｜>"},
    {128824, "<｜place▁holder▁for▁pointer▁replace｜>"},
    {128825, "｜DSML｜"},
    {128826, "<｜begin▁sys｜>"},
    {128827, "<｜end▁sys｜>"},
    {128828, "<｜latest_reminder｜>"},
    {128829, "<｜action｜>"},
    {128830, "<｜query｜>"},
    {128831, "<｜authority｜>"},
    {128832, "<｜domain｜>"},
    {128833, "<｜task｜>"},
    {128834, "<｜political｜>"},
    {128835, "<｜entity｜>"},
    {128836, "<｜title｜>"},
    {128837, "<｜safety｜>"},
    {128838, "<｜answer｜>"},
    {128839, "<｜search｜>"},
    {128842, "<｜search▁begin｜>"},
    {128843, "<｜search▁end｜>"},
    {128844, "<｜extracted_url｜>"},
    {128845, "<｜read_url｜>"},
    {128846, "<｜end_of_query｜>"},
    {129262, "<｜rl_image_pad｜>"},
    {129263, "<｜rl_image_start｜>"},
    {129264, "<｜image2｜>"},
    {129265, "<｜/table>｜"},  // sic: '>' before the closing bar, as in the GGUF
    {129266, "<｜table｜>"},
    {129267, "<｜/td｜>"},
    {129268, "<｜td｜>"},
    {129269, "<｜/tr｜>"},
    {129270, "<｜tr｜>"},
    {129271, "<｜/polygon｜>"},
    {129272, "<｜polygon｜>"},
    {129273, "<｜/point｜>"},
    {129274, "<｜point｜>"},
    {129275, "<｜/box｜>"},
    {129276, "<｜box｜>"},
    {129277, "<｜/ref｜>"},
    {129278, "<｜ref｜>"},
    {129279, "<｜image｜>"},
}};

}  // namespace

std::span<const AddedTokenId> deepseek_v4_added_tokens() { return kTokens; }

}  // namespace ds4::tok
