// Stub for the libclang check of the metal-cpp adapter: the libdispatch types metal-cpp mentions.
#pragma once
typedef struct dispatch_data_s* dispatch_data_t;
typedef struct dispatch_queue_s* dispatch_queue_t;
