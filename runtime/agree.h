// One agreement step over a communicator: every rank brings its own Status and
// every rank leaves with the same one, the first refusing rank's (its code and
// message, prefixed with the rank), or OK when none refused. Used where one rank
// alone can find a fault (a bad checkpoint file, a run directory another job
// holds): the others learn it at once and end with the same line and exit code
// instead of waiting at their next collective for the timeout.
#pragma once

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace planner {

// A collective: every rank of `comm` must call it. A failure of the all-gather
// itself is returned as is. Messages are cut to 1000 bytes.
Status AgreeOnStatus(Communicator& comm, const Status& mine);

// The same Status with another message (Status has no public constructor by code).
Status StatusWithMessage(StatusCode code, std::string message);

}  // namespace planner
