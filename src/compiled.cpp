// ppsched compiled once for a program built with PPSCHED_COMPILED (<ppsched/config.hpp>).
#include <ppsched/compiled.hpp>
