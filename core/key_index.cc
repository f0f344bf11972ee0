#include "core/key_index.h"
