/* `mokc train`: the training loop (CPU backend for now). */
#ifndef MOKC_TRAIN_H
#define MOKC_TRAIN_H

/* argv[0] = "train", argv[1] = SPEC.json, then --set key=value pairs. Returns the exit code. */
int cmd_train(int argc, char **argv, const char *help);

#endif
