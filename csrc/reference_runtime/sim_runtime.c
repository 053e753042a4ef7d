/* placeholder: the reference simulated runtime is being written */
#include "torchvendor/runtime.h"
