// NID range expressions (stub; see nidrange.cpp).
#pragma once
