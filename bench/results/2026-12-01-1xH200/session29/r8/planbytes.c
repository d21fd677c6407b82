#include <stdio.h>
#include "gpu/moe_mok.h"
int main(void) {
    const int Ns[2] = {8192, 16384};
    for (int e = 0; e < 2; e++)
        for (int n = 0; n < 2; n++) {
            MoeGpuDims d = {.C = 2048, .E = e ? 128 : 64, .k = 8, .I = 768, .n_shared = 0, .sigmoid = 0, .norm_topk = 1,
                            .scaling = 1.0, .ep = e ? 2 : 1, .ep_rank = 0};
            const int layers = 15;
            size_t saved = moe_mok_saved_bytes(&d, Ns[n]) * layers, all = moe_mok_bytes(&d, Ns[n], layers),
                   win = moe_mok_window_bytes(&d, Ns[n], layers);
            printf("E=%d ep=%d N=%d: saved %.1f MiB, scratch %.1f MiB, window %.1f MiB, sum %.1f MiB\n", d.E, d.ep, Ns[n],
                   saved / 1048576.0, (all - win) / 1048576.0, win / 1048576.0, (saved + all) / 1048576.0);
        }
    return 0;
}
