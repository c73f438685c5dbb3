/* SPDX-License-Identifier: GPL-2.0 */
/* Host stand-in for <linux/types.h> (tests/kunit_host). */
#ifndef _KUNIT_HOST_TYPES_H
#define _KUNIT_HOST_TYPES_H
#include <stdbool.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;
#define U64_MAX UINT64_MAX
#endif
