// o2iblnd wire codec (stub).
#pragma once
