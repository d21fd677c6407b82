/* The stop flag behind SIGTERM/SIGINT/SIGUSR1; the handler only does async-signal-safe work. */
#include "signals.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;
static int announce_stop;

static void say(const char *msg) {
    ssize_t ignored = write(STDERR_FILENO, msg, strlen(msg));
    (void)ignored;
}

static void on_signal(int sig) {
    if (sig == SIGINT && stop_signal) {
        say("mokc: second SIGINT: exiting now, without a checkpoint\n");
        _exit(128 + SIGINT);
    }
    if (stop_signal) return;
    stop_signal = sig;
    if (announce_stop) {
        say("mokc: ");
        say(signals_name(sig));
        say(" received: stopping after this step (with a checkpoint when checkpoint.dir is set); "
            "a second SIGINT exits at once\n");
    }
}

void signals_install(int announce) {
    announce_stop = announce;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* file and MPI calls in flight carry on; the loop polls the flag */
    int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, NULL);
}

int signals_stop_requested(void) { return stop_signal; }

/* Static strings only: the handler calls it. */
const char *signals_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a stop signal";
    }
}
