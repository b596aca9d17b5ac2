#include "lnd/o2iblnd/wire.hpp"
