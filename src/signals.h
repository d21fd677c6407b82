/*
 * Preemption signals. SIGTERM (what Slurm and most schedulers send before a kill), SIGINT (Ctrl-C)
 * and SIGUSR1 (sbatch --signal=USR1@60; Open MPI's mpirun forwards it to every rank) only set a
 * flag: the training loop checks it at the end of each step, all ranks agree, and the run writes
 * a checkpoint and exits. A second SIGINT ends the process at once (exit 130), for a user who
 * will not wait for the step to finish.
 */
#ifndef MOKC_SIGNALS_H
#define MOKC_SIGNALS_H

/* announce: print one line on stderr when the first stop signal arrives (rank 0 only). */
void signals_install(int announce);
/* The first stop signal received so far, or 0. */
int signals_stop_requested(void);
/* "SIGTERM", "SIGINT", "SIGUSR1" (async-signal-safe: static strings). */
const char *signals_name(int sig);

#endif
