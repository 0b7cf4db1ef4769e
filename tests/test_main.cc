// doctest's main, in its own translation unit (toolchain.md: compile once).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
