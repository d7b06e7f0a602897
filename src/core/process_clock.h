// Seconds since this process started (its first static initialisation): start-up reports say
// what launch-to-first-step cost, phase by phase.
#pragma once

namespace ulysses {

double seconds_since_launch();

}  // namespace ulysses
