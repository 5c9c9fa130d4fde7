#!/bin/sh
# Compiles ffmpeg from bookworm's source package (in /usr/src, build.sh's ffmpeg-build base)
# with only what capture runs (capture/encode.py), installed under PREFIX (/usr/local):
# - clips: raw frames on stdin (pipe, rawvideo) through crop/vflip/format (and the scale
#   filter format conversion inserts) to libx264 or, on the render node, hwupload and
#   h264_vaapi, as fragmented MP4 on stdout;
# - the start-up VA-API probe: the lavfi color source into the null muxer;
# - mov demuxing and h264 decoding, so a clip can be read back in the image.
# Every other codec, format, filter, device and external library is left out
# (--disable-everything, --disable-autodetect), so the binary links only libx264 and libva.
# usage: ffmpeg.sh DESTDIR
set -eu
destdir=$1
mkdir -p /tmp/ffmpeg && cd /tmp/ffmpeg
dpkg-source --no-check -x /usr/src/ffmpeg_*.dsc src >/dev/null
cd src
./configure --prefix=/usr/local \
  --disable-everything --disable-autodetect --disable-debug --disable-doc \
  --disable-ffprobe --disable-ffplay --disable-network \
  --enable-gpl --enable-libx264 --enable-vaapi \
  --enable-protocol=pipe,file \
  --enable-demuxer=rawvideo,mov \
  --enable-decoder=rawvideo,h264 \
  --enable-indev=lavfi \
  --enable-filter=color,crop,vflip,format,hwupload,scale,null,trim,fps,setpts \
  --enable-encoder=libx264,h264_vaapi,rawvideo,wrapped_avframe \
  --enable-muxer=mp4,null \
  --enable-parser=h264 \
  --enable-bsf=h264_mp4toannexb,extract_extradata,h264_metadata >/tmp/ffmpeg/configure.log \
  || { tail -n 40 /tmp/ffmpeg/configure.log ffbuild/config.log; exit 1; }
make -j"$(nproc)" >/dev/null
make install DESTDIR="$destdir" >/dev/null
rm -rf "$destdir/usr/local/share" "$destdir/usr/local/include" "$destdir/usr/local/lib"
