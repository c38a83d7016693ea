package chat

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// webpSize reads the canvas of each of WebP's three first chunks, as its
// container specification lays them out, and refuses anything else.
func TestWebPSize(t *testing.T) {
	t.Parallel()
	webp := func(fourCC string, data ...byte) []byte {
		b := append([]byte("RIFF\x00\x00\x00\x00WEBP"+fourCC+"\x00\x00\x00\x00"), data...)
		for len(b) < 40 {
			b = append(b, 0)
		}
		return b
	}
	// VP8X: flags, 3 reserved bytes, then width-1 and height-1 on 24 bits.
	w, h, err := webpSize(webp("VP8X", 0, 0, 0, 0, 0x40, 0x1f, 0x00, 0x01, 0x00, 0x00)) // 8001×2
	require.NoError(t, err)
	require.Equal(t, [2]int{8001, 2}, [2]int{w, h})
	// VP8L: the signature 0x2f, then width-1 and height-1 on 14 bits each.
	bits := make([]byte, 4)
	binary.LittleEndian.PutUint32(bits, 99|199<<14)
	w, h, err = webpSize(webp("VP8L", append([]byte{0x2f}, bits...)...))
	require.NoError(t, err)
	require.Equal(t, [2]int{100, 200}, [2]int{w, h})
	// VP8: a frame tag, the start code 9d 01 2a, then width and height on
	// 14 bits (their top two bits scale).
	w, h, err = webpSize(webp("VP8 ", 0, 0, 0, 0x9d, 0x01, 0x2a, 0x40, 0xc1, 0x20, 0x00)) // 320 (scaled) × 32
	require.NoError(t, err)
	require.Equal(t, [2]int{320, 32}, [2]int{w, h})

	for name, b := range map[string][]byte{
		"VP8L without its signature": webp("VP8L", 0x00),
		"VP8 without its start code": webp("VP8 ", 0, 0, 0, 0, 0, 0),
		"another chunk":              webp("ALPH"),
		"cut short":                  []byte("RIFF\x00\x00\x00\x00WEBPVP8X"),
	} {
		_, _, err := webpSize(b)
		require.Error(t, err, name)
	}
}
