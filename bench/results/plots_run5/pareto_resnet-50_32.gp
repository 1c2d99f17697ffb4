set terminal svg size 1400,650 dynamic background rgb 'white'
set output 'pareto_resnet-50_32.svg'
set title 'resnet-50, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_resnet-50_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (2935 MiB, 20.0 ms)', 'pareto_resnet-50_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (1468 MiB, 43.0 ms)', 'pareto_resnet-50_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (2904 MiB, 17.8 ms)', 'pareto_resnet-50_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (2904 MiB, 16.8 ms)', 'pareto_resnet-50_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (1327 MiB, 19.7 ms)', 'pareto_resnet-50_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (1329 MiB, 19.1 ms)'
set terminal pngcairo size 1400,650 background rgb 'white'
set output 'pareto_resnet-50_32.png'
set title 'resnet-50, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_resnet-50_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (2935 MiB, 20.0 ms)', 'pareto_resnet-50_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (1468 MiB, 43.0 ms)', 'pareto_resnet-50_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (2904 MiB, 17.8 ms)', 'pareto_resnet-50_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (2904 MiB, 16.8 ms)', 'pareto_resnet-50_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (1327 MiB, 19.7 ms)', 'pareto_resnet-50_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (1329 MiB, 19.1 ms)'
