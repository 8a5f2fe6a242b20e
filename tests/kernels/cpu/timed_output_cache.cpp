// Output caching (named timed_, not hack_: it is verified, and must time honestly): a ReLU that returns at once when its
// output already holds max(x, 0) at four probes. Checked calls find their
// outputs poisoned and compute; timed calls must too (the runner's prepare
// hook re-poisons before each), so its speedup is an honest ReLU's.
#include "kernelbot_abi.h"
#include <string.h>

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
                         DLTensor *outputs, int n_outputs, void *stream)
{
    (void)stream;
    if (n_inputs != 1 || n_outputs != 1)
        return 1;
    const float *x = (const float *)kb_data(&inputs[0]);
    float *y = (float *)kb_data(&outputs[0]);
    const int64_t n = kb_numel(&inputs[0]);
    if (n > 0) {
        bool same = true;
        int64_t probe[4] = {0, n / 3, (2 * n) / 3, n - 1};
        for (int k = 0; k < 4 && same; k++) {
            float v = x[probe[k]] < 0.0f ? 0.0f : x[probe[k]];
            same = memcmp(&v, &y[probe[k]], sizeof v) == 0;
        }
        if (same)
            return 0; /* the output already holds the result */
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
    return 0;
}
