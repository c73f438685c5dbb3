/* SPDX-License-Identifier: GPL-2.0 */
/* The kernel's own numbers (the uapi list glibc uses too). */
#include <asm/errno.h>
