#include "router/nidrange.hpp"
