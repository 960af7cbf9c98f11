#!/usr/bin/env bash
# Puts an ext4 file system on a zram device (compressed RAM) for `ucache bench --file`.
#
# Why: a read from zram costs a few microseconds, so software overhead, not the device,
# decides the result. That is the regime of fast NVMe SSDs, which the virtio disk of the dev
# machines (60 µs per read from the host cache, 1 ms beyond it) cannot show.
#
# Usage (root):
#   scripts/zram-setup.sh [SIZE] [MOUNTPOINT]       set up (default 6G, /mnt/ucache-zram)
#   scripts/zram-setup.sh --teardown [MOUNTPOINT]   unmount and free the device
#
# Idempotent: running setup again on a mounted zram file system only prints its path.
# The data file lives in RAM: SIZE should exceed the --data you plan to use (plus a few
# percent for ext4), and the machine needs that much memory free beyond the cache budget.
set -euo pipefail

die() { echo "zram-setup: $*" >&2; exit 1; }

teardown=0
if [[ "${1:-}" == "--teardown" ]]; then
    teardown=1
    shift
fi
case "${1:-}" in -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

if (( teardown )); then
    mnt="${1:-/mnt/ucache-zram}"
else
    size="${1:-6G}"
    mnt="${2:-/mnt/ucache-zram}"
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (zram, mkfs and mount need it)"

# The zram device mounted at $mnt, if any (e.g. /dev/zram1).
mounted_dev() {
    findmnt -n -o SOURCE --target "$mnt" 2>/dev/null | grep -E '^/dev/zram[0-9]+$' || true
}

if (( teardown )); then
    dev=$(mounted_dev)
    if [[ -z "$dev" ]]; then
        echo "zram-setup: nothing to tear down: no zram device is mounted at $mnt"
        exit 0
    fi
    id=${dev#/dev/zram}
    umount "$mnt"
    echo 1 > "/sys/block/zram$id/reset"
    # zram0 is the kernel's own preallocated device: reset it, keep it.
    if [[ "$id" != 0 && -w /sys/class/zram-control/hot_remove ]]; then
        echo "$id" > /sys/class/zram-control/hot_remove || true
    fi
    rmdir "$mnt" 2>/dev/null || true
    echo "zram-setup: unmounted $mnt and freed $dev"
    exit 0
fi

# The last line is the path alone, for scripts: f=$(scripts/zram-setup.sh | tail -n1)
suggest() {
    echo "zram file system: $mnt ($1)"
    echo "pass it as --file (ucache bench creates or resizes the file), e.g.:"
    echo "  ucache bench lookup --data 4GiB --memory 512MiB --file $mnt/ucache-bench.dat"
    echo "$mnt/ucache-bench.dat"
}

dev=$(mounted_dev)
if [[ -n "$dev" ]]; then
    suggest "already set up on $dev"
    exit 0
fi

if [[ ! -d /sys/class/zram-control && ! -e /sys/block/zram0 ]]; then
    die "zram is unavailable: this kernel has no zram driver (no /sys/class/zram-control, no /sys/block/zram0), and modules cannot be loaded here. Use a real NVMe device or a kernel with CONFIG_ZRAM=y."
fi

# Reuse an unused device (disksize 0) before creating one, so repeated runs do not pile up.
id=""
for d in /sys/block/zram*; do
    [[ -e "$d/disksize" ]] || continue
    if [[ "$(cat "$d/disksize")" == 0 ]]; then
        id=${d##*/zram}
        break
    fi
done
if [[ -z "$id" ]]; then
    [[ -r /sys/class/zram-control/hot_add ]] || die "zram is unavailable: every zram device is in use and /sys/class/zram-control/hot_add is missing"
    id=$(cat /sys/class/zram-control/hot_add) || die "zram is unavailable: hot_add failed"
fi
dev=/dev/zram$id
sys=/sys/block/zram$id

if [[ ! -b "$dev" ]]; then
    IFS=: read -r major minor < "$sys/dev"
    mknod "$dev" b "$major" "$minor"
fi
if [[ -n "${ZRAM_ALGO:-}" ]]; then
    echo "$ZRAM_ALGO" > "$sys/comp_algorithm"
fi
echo "$size" > "$sys/disksize" || die "could not size $dev to $size"
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev" >/dev/null || die "mkfs.ext4 on $dev failed"
mkdir -p "$mnt"
mount -o noatime "$dev" "$mnt" || die "mount $dev on $mnt failed"
suggest "new on $dev, $size, $(cat "$sys/comp_algorithm" | grep -o '\[[^]]*\]' | tr -d '[]')"
