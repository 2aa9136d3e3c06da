// NameTable (src/core/name_table.h): the one template behind every command-line enum's parser, names, errors
// and --help choices.
#include <doctest/doctest.h>

#include "tests/unit/test_util.h"

#include <string>
#include <vector>

#include "src/core/name_table.h"
#include "src/plan/schedule_spec.h"

namespace {

enum class Fruit { apple, pear, fig };
constexpr auto kFruits = nb::name_table<Fruit>("--fruit", {
    {"apple", Fruit::apple},
    {"pear", Fruit::pear, "the soft one"},
    {"fig", Fruit::fig},
});

}  // namespace

TEST_CASE("a name table parses its names, names its values and lists them") {
    CHECK(kFruits.parse("pear") == Fruit::pear);
    CHECK(kFruits.find("plum") == std::nullopt);
    CHECK(kFruits.name(Fruit::fig) == "fig");
    CHECK(kFruits.names() == std::vector<std::string_view>{"apple", "pear", "fig"});
    CHECK(kFruits.values() == std::vector<Fruit>{Fruit::apple, Fruit::pear, Fruit::fig});
    CHECK(kFruits.valid_text() == "apple, pear, fig");
    CHECK(kFruits.choices_text() == "apple, pear (the soft one) or fig");
    CHECK(nb::test::usage_error([] { kFruits.parse("plum"); }) == "unknown --fruit 'plum' (valid: apple, pear, fig)");
}

TEST_CASE("every schedule's name parses back to it") {
    for (const nb::ScheduleKind kind : nb::kScheduleKinds.values())
        CHECK(nb::parse_schedule_kind(nb::schedule_kind_name(kind)) == kind);
}
