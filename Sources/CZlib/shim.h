// The system's zlib (Debian: zlib1g-dev), for WebSocket's permessage-deflate (RFC 7692).
#include <zlib.h>
