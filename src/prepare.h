/*
 * `mokc prepare`: turns a text file into byte-level token files (vocab 256) for training and
 * validation, in the HDF5 format documented in data.h.
 */
#ifndef MOKC_PREPARE_H
#define MOKC_PREPARE_H

/* argv[0] is the command name ("prepare"), argv[1..] its flags. Returns the process exit code:
 * 0 on success (or --help), 2 (MOKC_EXIT_USAGE) on a bad flag or input, 1 on a write failure.
 * Errors are printed on stderr, one message with a hint. */
int cmd_prepare(int argc, char **argv);

#endif
