// defines: the stop request — SIGTERM, SIGINT or SIGUSR1 (as sent by `sbatch --signal=B:USR1@N`)
//          asks the trainer to write a snapshot at the next step boundary and exit with
//          kExitRequeue, which the batch script turns into `scontrol requeue`.
#pragma once

namespace ddp {

// Installs the handlers for SIGTERM, SIGINT and SIGUSR1 (they only set a flag).
void install_stop_signal_handlers();
// True once one of them arrived (async-signal-safe to read).
bool stop_requested();
int stop_signal();  // the signal that asked, 0 if none

// "SIGTERM", "SIGUSR1", ... or "a signal to another rank" when this rank got none.
const char* stop_reason();

}  // namespace ddp
