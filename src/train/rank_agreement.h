// Ranks that agree: every rank of a job reads its own config, model config and data, and ranks
// started with different ones (another seq_len, batch file or config) would either run apart
// silently or die inside a collective (MPI_ERR_TRUNCATE). At start-up each rank's description
// of what must match is compared across the world, and a difference is refused with one line
// naming the first differing key, both values and both ranks.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"

namespace ulysses {

// Collective over `world`: every rank calls it with its own `what`. Returns when all agree;
// else rank 0 throws "<context>: the ranks disagree at start-up: '<key>' is <a> on rank 0 but
// <b> on rank R ..." (the CLI prints it and aborts the job) and the other ranks wait to be
// aborted. Cost when they agree: one all-gather of two numbers per rank.
void check_ranks_agree(Communicator& world, const nlohmann::json& what, const std::string& context);

}  // namespace ulysses
