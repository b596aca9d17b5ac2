// socklnd wire codec (stub).
#pragma once
