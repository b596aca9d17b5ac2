#include "lnd/socklnd/wire.hpp"
