/* kb_emu: __half lives in cuda_runtime.h */
#include "cuda_runtime.h"
